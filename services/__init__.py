"""Cairn's services: decider, scheduler, timer, sweeper. Each is a handler + a composition root."""
