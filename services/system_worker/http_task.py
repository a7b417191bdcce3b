"""HTTP: one request, as Conductor's HttpTask makes it (docs/research/conductor-operators.md, HTTP).

Input: the `http_request` map, or the whole task input when there is none: `uri` (required,
http or https), `method` (required), `headers` (a map; null values are dropped, the rest
stringified), `body` (a string is sent as is, anything else as JSON), `accept` (a string or a
list; default application/json), `contentType` (default application/json),
`connectionTimeOut` and `readTimeOut` (milliseconds, default 3000 each; 0 means no limit, as in
Conductor). A 2xx answer COMPLETES the task with `response = {statusCode, headers (name -> list
of strings), body, reasonPhrase}`; `body` is the parsed JSON when the body parses as JSON, else
the text, and null when empty. Anything else FAILS the attempt, so the decider retries it per
the TaskDef.

Where Cairn differs from Conductor (for docs/operators.md):
- A non-2xx answer keeps the `response` map (statusCode, headers, body, reasonPhrase) in the
  FAILED task's output, so a workflow can look at what the server said; the reason names the
  status ("HTTP 404 Not Found from GET http://host/path"). Conductor throws there and puts the
  exception's text in `response` (a string, not a map) and reads no body.
- The JSON of a body keeps its types: `true` stays a boolean and 7 stays an integer (Conductor
  turns a JSON boolean or string into text and a number into a double).
- The body read is bounded (`max_body_bytes`, 1 MB by default, after content decoding): a bigger
  one FAILS the attempt, with the status and headers kept and a null body. The whole result must
  fit in one Kafka message too (handler.py).
- Only http and https URIs; `vipAddress` and `appName` (Conductor's Eureka discovery) are
  ignored; the method is upper-cased. Redirects are followed (at most 20).
- Header names in `response.headers` are as the server sent them; names that differ only in
  case are merged, as Spring's HttpHeaders does.
- A missing URI or method FAILS the task with Conductor's reasons ("Missing HTTP URI. See
  documentation for HttpTask for required input parameters", "No HTTP method specified"), as
  Conductor does: retried per the TaskDef even though a retry cannot succeed.
"""

from __future__ import annotations

import http
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import httpx

from services.system_worker.outcome import Outcome
from shared.models.runtime import TaskStatus

DEFAULT_TIMEOUT_MS = 3000
DEFAULT_MEDIA_TYPE = "application/json"
MAX_BODY_BYTES = 1_000_000
MISSING_URI = "Missing HTTP URI. See documentation for HttpTask for required input parameters"
MISSING_METHOD = "No HTTP method specified"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class _BadInput(ValueError):
    """The task's input cannot make a request."""


class _TooLarge(Exception):
    pass


def request_of(input_data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request map: `http_request`, else the whole input (Conductor reads either)."""
    request = input_data.get("http_request")
    if request is None:
        return input_data
    if not isinstance(request, Mapping):
        raise _BadInput(f"http_request must be a map of the request to make, not {type(request).__name__}")
    return request


def _text(value: Any) -> str:
    """A header value as text, as Java's toString would write it for JSON values."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _timeout_s(request: Mapping[str, Any], name: str) -> float | None:
    value = request.get(name)
    if value is None:
        return DEFAULT_TIMEOUT_MS / 1000
    try:
        if isinstance(value, bool):
            raise ValueError
        millis = float(value)
    except (TypeError, ValueError):
        raise _BadInput(f"{name} must be a number of milliseconds, not {value!r}") from None
    if millis < 0 or not math.isfinite(millis):
        raise _BadInput(f"{name} must be 0 (no limit) or more milliseconds, not {value!r}")
    return None if millis == 0 else millis / 1000


def _headers(request: Mapping[str, Any]) -> dict[str, str]:
    accept = request.get("accept") or DEFAULT_MEDIA_TYPE
    if isinstance(accept, list):
        accept = ", ".join(_text(item) for item in accept)
    headers = {
        "Accept": _text(accept),
        "Content-Type": _text(request.get("contentType") or DEFAULT_MEDIA_TYPE),
    }
    given = request.get("headers") or {}
    if not isinstance(given, Mapping):
        raise _BadInput(f"headers must be a map of header names to values, not {type(given).__name__}")
    for name, value in given.items():
        if value is None:
            continue
        for existing in [key for key in headers if key.lower() == str(name).lower()]:
            del headers[existing]  # a header given explicitly wins over accept/contentType
        headers[str(name)] = _text(value)
    return headers


def _content(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()


def _where(method: str, url: httpx.URL) -> str:
    """The request for a reason text: without its query string and user info, which may carry
    secrets."""
    return f"{method} {url.copy_with(query=None, fragment=None, userinfo=b'')}"


def _response_headers(response: httpx.Response) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for raw_name, raw_value in response.headers.raw:
        name = raw_name.decode("latin-1")
        key = names.setdefault(name.lower(), name)
        merged.setdefault(key, []).append(raw_value.decode("latin-1"))
    return merged


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _body(content: bytes, response: httpx.Response) -> Any:
    if not content:
        return None
    try:
        text = content.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = content.decode("utf-8", errors="replace")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return text


def _phrase(response: httpx.Response) -> str:
    if response.reason_phrase:
        return response.reason_phrase
    try:
        return http.HTTPStatus(response.status_code).phrase
    except ValueError:
        return ""


async def _read(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise _TooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


async def run_http(
    client: httpx.AsyncClient, input_data: Mapping[str, Any], max_body_bytes: int = MAX_BODY_BYTES
) -> Outcome:
    """Make the request the task's input describes; never raises for anything the request or
    the server did (those are FAILED outcomes)."""
    try:
        request = request_of(input_data)
        uri, method = request.get("uri"), request.get("method")
        if uri is None or uri == "":
            return Outcome.failed(MISSING_URI)
        if method is None or method == "":
            return Outcome.failed(MISSING_METHOD)
        if not isinstance(uri, str):
            raise _BadInput(f"uri must be a string, not {type(uri).__name__}")
        method = str(method).upper()
        if not _TOKEN.match(method):
            raise _BadInput(f"method {method!r} is not an HTTP method")
        try:
            url = httpx.URL(uri)
        except httpx.InvalidURL as error:
            raise _BadInput(f"uri {uri!r} is not a valid URL: {error}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise _BadInput(f"uri {uri!r}: only http:// and https:// URLs with a host are supported")
        connect_s = _timeout_s(request, "connectionTimeOut")
        read_s = _timeout_s(request, "readTimeOut")
        headers = _headers(request)
        content = _content(request.get("body"))
    except _BadInput as error:
        return Outcome.failed(str(error))

    timeout = httpx.Timeout(connect=connect_s, read=read_s, write=read_s, pool=connect_s)
    where = _where(method, url)
    try:
        async with client.stream(method, url, headers=headers, content=content, timeout=timeout) as response:
            answer: dict[str, Any] = {
                "statusCode": response.status_code,
                "headers": _response_headers(response),
                "body": None,
                "reasonPhrase": _phrase(response),
            }
            try:
                answer["body"] = _body(await _read(response, max_body_bytes), response)
            except _TooLarge:
                return Outcome.failed(
                    f"the response body from {where} is larger than {max_body_bytes} bytes, "
                    "the most an HTTP task reads",
                    {"response": answer},
                )
    except httpx.ConnectTimeout:
        return Outcome.failed(f"{where}: no connection within {_ms(connect_s)} (connectionTimeOut)")
    except httpx.ReadTimeout:
        return Outcome.failed(f"{where}: no response within {_ms(read_s)} (readTimeOut)")
    except httpx.WriteTimeout:
        return Outcome.failed(f"{where}: the request was not sent within {_ms(read_s)} (readTimeOut)")
    except httpx.PoolTimeout:
        return Outcome.failed(f"{where}: no free connection within {_ms(connect_s)} (connectionTimeOut)")
    except httpx.ConnectError as error:
        return Outcome.failed(f"{where}: cannot connect: {error or type(error).__name__}")
    except httpx.TooManyRedirects as error:
        return Outcome.failed(f"{where}: {error}")
    except (httpx.HTTPError, httpx.InvalidURL, httpx.CookieConflict) as error:
        return Outcome.failed(f"{where}: {type(error).__name__}: {error}")
    except (ValueError, UnicodeError) as error:  # e.g. a header value h11 refuses to send
        return Outcome.failed(f"{where}: cannot send the request: {error}")
    output = {"response": answer}
    if 200 <= response.status_code < 300:
        return Outcome(TaskStatus.COMPLETED, output)
    status = " ".join(part for part in (str(response.status_code), answer["reasonPhrase"]) if part)
    return Outcome.failed(f"HTTP {status} from {where}", output)


def _ms(seconds: float | None) -> str:
    return "no limit" if seconds is None else f"{seconds * 1000:.0f} ms"
