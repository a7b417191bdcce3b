"""Ports: what services need from a store and a bus, independent of any product."""
