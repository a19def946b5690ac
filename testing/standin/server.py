#!/usr/bin/env python3
"""Scripted stand-in model server for running the real agent CLIs offline (tests only).

Standard library only (Python 3.11+). Listens on 127.0.0.1 (never anything else) on a free port.

Speaks:
  * Anthropic  POST /v1/messages            (Claude Code; SSE when "stream": true)
               POST /v1/messages/count_tokens and any other side request: harmless answers
  * OpenAI     POST /v1/chat/completions    (Copilot CLI offline provider mode; SSE chunks)
  * OpenAI     POST /v1/responses           (Codex; SSE response.* events)
  * GET /v1/models (and /models): a model list; anything else: 404 JSON, logged.

Behaviour per "main" request (a request that offers tools to the model), in order:
  1. the scenario's `script` entries, one per main request, while there are any;
  2. then `auto`: a conversation whose last message is not a tool result gets a tool call running
     `tool_command` (a shell command); one whose last message is a tool result gets `final_text`.
A session of an agent is therefore: one tool call (e.g. check the first unchecked box of
RALPH_TASK.md) and one final text. `rate_limit.first` = K makes the first K main requests fail
with a rate limit instead (see README.md for the kinds); with `rate_limit.after` = N the first N
main requests are answered normally first (so the limited session has already spent tokens). Requests without tools (titles, quota
probes, ...) are "side" requests: answered with a short text, never rate-limited unless
`rate_limit.include_side` is true.

Every request is appended to the JSON Lines log (--log) as it is answered.

Usage:
  server.py [--scenario FILE] [--port-file FILE] [--log FILE] [--idle-timeout S]
            [--max-requests N] [--dump-dir DIR]
The port is printed on stdout ("PORT <n>") and written to --port-file (atomically).
The server exits after --idle-timeout seconds without a request (default 120) or after answering
--max-requests requests (default 500), whichever comes first.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import random
import re
import string
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOST = "127.0.0.1"  # loopback only, by design

# sed -i '0,/RE/s//X/' replaces only the first match in the file (GNU sed).
DEFAULT_TOOL_COMMAND = "sed -i '0,/- \\[ \\]/s//- [x]/' RALPH_TASK.md"
DEFAULT_FINAL_TEXT = "I checked the first unchecked criterion in RALPH_TASK.md."
SIDE_TEXT = "OK"


def rid(prefix: str, n: int = 24) -> str:
    return prefix + "".join(random.choices(string.ascii_letters + string.digits, k=n))


# --------------------------------------------------------------------------------------------
# Request inspection (all three wire formats)
# --------------------------------------------------------------------------------------------

def _texts_of_content(content) -> list[str]:
    """Text pieces of a message content (string or list of blocks/parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                t = part.get("type")
                if t in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
                    out.append(part["text"])
    return out


def inspect_request(path: str, body: dict) -> dict:
    """Return model, tools, whether the conversation ends with a tool result, the user prompt."""
    info = {"model": body.get("model"), "stream": bool(body.get("stream")), "tools": [],
            "tool_result": False, "tool_results": 0, "user_texts": [], "messages": 0}
    tools = body.get("tools") or []
    for t in tools:
        if not isinstance(t, dict):
            continue
        name = t.get("name") or (t.get("function") or {}).get("name") or t.get("type")
        if name:
            info["tools"].append(name)

    if "/responses" in path:
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = items or []
        info["messages"] = len(items)
        last_kind = None
        for it in items:
            if not isinstance(it, dict):
                continue
            typ = it.get("type", "message")
            if typ in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                info["tool_results"] += 1
                last_kind = "tool_result"
            elif typ == "message":
                role = it.get("role")
                if role == "user":
                    info["user_texts"].append(_texts_of_content(it.get("content")))
                    last_kind = "user"
                elif role == "assistant":
                    last_kind = "assistant"
            elif typ in ("function_call", "custom_tool_call", "local_shell_call"):
                last_kind = "tool_call"
        info["tool_result"] = last_kind == "tool_result"
        if isinstance(body.get("instructions"), str):
            info["system_len"] = len(body["instructions"])
        return info

    msgs = body.get("messages") or []
    info["messages"] = len(msgs)
    last_is_tool_result = False
    for m in msgs:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        content = m.get("content")
        if role == "tool":  # OpenAI chat
            info["tool_results"] += 1
            last_is_tool_result = True
            continue
        if role == "user":
            has_tr = isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
            if has_tr:
                info["tool_results"] += sum(1 for b in content
                                            if isinstance(b, dict) and b.get("type") == "tool_result")
            texts = _texts_of_content(content)
            if texts:
                info["user_texts"].append(texts)
            last_is_tool_result = has_tr
        else:
            last_is_tool_result = False
    info["tool_result"] = last_is_tool_result
    return info


_WRAPPER = re.compile(r"^\s*<([A-Za-z_][\w-]*)[^>]*>.*</\1>\s*$", re.S)
_LEADING_DATETIME = re.compile(r"^\s*<current_datetime>[^<]*</current_datetime>\s*")
_WRAPPER_PREFIXES = ("# AGENTS.md instructions", "<environment_context>", "<system-reminder>",
                     "<user_instructions>", "<permissions instructions>")


def user_prompt(info: dict) -> str:
    """The user's prompt: the first user text piece that is not agent-added context.

    Agents put reminders/context blocks (`<system-reminder>…</system-reminder>`,
    `<environment_context>…`, AGENTS.md instructions) in user messages before or beside the prompt;
    those are skipped. When every piece looks like a wrapper, the longest piece is returned.
    """
    pieces = [t for texts in info["user_texts"] for t in texts if t.strip()]
    for t in pieces:
        if t.lstrip().startswith(_WRAPPER_PREFIXES) or _WRAPPER.match(t):
            continue
        return _LEADING_DATETIME.sub("", t, count=1)  # Copilot prefixes the prompt with the time
    return max(pieces, key=len) if pieces else ""


# --------------------------------------------------------------------------------------------
# Server state
# --------------------------------------------------------------------------------------------

class State:
    def __init__(self, scenario: dict, log_path: str | None, dump_dir: str | None,
                 max_requests: int):
        self.scenario = scenario
        self.script = list(scenario.get("script") or [])
        self.log_path = log_path
        self.dump_dir = dump_dir
        self.max_requests = max_requests
        self.lock = threading.Lock()
        self.n = 0          # all requests
        self.main_n = 0     # main (tool-offering) requests
        self.last_activity = time.monotonic()
        self.done = threading.Event()
        rl = scenario.get("rate_limit") or {}
        self.rate_limit = rl
        self.rate_limited_left = int(rl.get("first", 0))
        self.reset_at: float | None = None  # usage limits: fixed on the first limited answer
        self.omit_events = set(scenario.get("omit_events") or [])  # experiments: drop SSE events

    def next_index(self) -> int:
        with self.lock:
            self.n += 1
            self.last_activity = time.monotonic()
            return self.n

    def log(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False)
        with self.lock:
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
            if rec["n"] >= self.max_requests:
                self.done.set()

    def decide(self, info: dict, is_main: bool) -> dict:
        """The action for this request: rate_limit / tool / text / error."""
        with self.lock:
            include_side = bool(self.rate_limit.get("include_side"))
            after = int(self.rate_limit.get("after", 0))
            due = self.main_n >= after if is_main else include_side
            if self.rate_limited_left > 0 and due:
                self.rate_limited_left -= 1
                return {"action": "rate_limit"}
            if (self.rate_limit.get("until_reset") and due and self.reset_at is not None
                    and time.time() < self.reset_at):
                # Limited until the reset passes, however often the client comes back.
                return {"action": "rate_limit"}
            if not is_main:
                return {"action": "text", "text": SIDE_TEXT, "side": True}
            self.main_n += 1
            if self.script:
                act = dict(self.script.pop(0))
                if act.get("action") != "auto":
                    return act
        if info["tool_result"]:
            return {"action": "text", "text": self.scenario.get("final_text", DEFAULT_FINAL_TEXT)}
        return {"action": "tool",
                "command": self.scenario.get("tool_command", DEFAULT_TOOL_COMMAND)}


# --------------------------------------------------------------------------------------------
# HTTP handler
# --------------------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ralph-standin/1"
    state: State  # set on the class by main()

    def log_message(self, fmt, *args):  # quiet; the JSON log is the record
        if os.environ.get("STANDIN_DEBUG"):
            sys.stderr.write("standin: " + (fmt % args) + "\n")

    # ---- plumbing ------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            data = bytearray()
            while True:
                size_line = self.rfile.readline().strip()
                size = int(size_line.split(b";")[0] or b"0", 16)
                if size == 0:
                    # trailers until blank line
                    while self.rfile.readline().strip():
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            raw = bytes(data)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc in ("zstd", "br"):
            raise ValueError(f"unsupported Content-Encoding {enc}")
        return raw

    def _send_json(self, status: int, obj, headers: dict | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_sse(self, headers: dict | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if not data:
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, name: str | None, obj, named: bool = True) -> None:
        """One SSE event. `named=False` (OpenAI chat chunks) sends no `event:` line; `name` is
        then only a label that the scenario's "omit_events" can refer to (experiments)."""
        if name and name in self.state.omit_events:
            return
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        head = f"event: {name}\n" if name and named else ""
        self._chunk(f"{head}data: {payload}\n\n".encode())

    # ---- entry points --------------------------------------------------------------------

    def do_GET(self):
        n = self.state.next_index()
        path = self.path.split("?")[0]
        rec = {"n": n, "ts": time.time(), "method": "GET", "path": self.path, "kind": "get"}
        if path.rstrip("/").endswith("/models"):
            model = self.state.scenario.get("model", "standin-model")
            # Both OpenAI ("data") and Anthropic-style lists are satisfied by this shape.
            self._send_json(200, {"object": "list", "data": [
                {"id": model, "object": "model", "created": 0, "owned_by": "standin",
                 "type": "model", "display_name": model}], "models": [], "has_more": False})
            rec["status"] = 200
        else:
            self._send_json(404, {"error": {"type": "not_found_error", "message": "stand-in: no such path"}})
            rec["status"] = 404
        self.state.log(rec)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = self.state.next_index()
        path = self.path.split("?")[0]
        rec: dict = {"n": n, "ts": time.time(), "method": "POST", "path": self.path}
        try:
            raw = self._read_body()
            body = json.loads(raw or b"{}")
        except Exception as e:  # noqa: BLE001
            rec.update(kind="bad_request", error=str(e))
            self._send_json(400, {"error": {"type": "invalid_request_error", "message": str(e)}})
            self.state.log(rec)
            return
        if self.state.dump_dir:
            with open(os.path.join(self.state.dump_dir, f"req-{n:03d}.json"), "wb") as f:
                f.write(raw)

        if path.endswith("/count_tokens"):
            info = inspect_request(path, body)
            rec.update(kind="count_tokens", model=info["model"])
            self._send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            self.state.log(rec)
            return

        if path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "chat"
        elif path.endswith("/responses"):
            api = "responses"
        else:
            rec.update(kind="unknown", status=404)
            self._send_json(404, {"error": {"type": "not_found_error", "message": "stand-in: no such path"}})
            self.state.log(rec)
            return

        info = inspect_request(path, body)
        prompt = user_prompt(info)
        is_main = bool(info["tools"])
        act = self.state.decide(info, is_main)
        rec.update(
            kind="main" if is_main else "side", api=api, model=info["model"],
            stream=info["stream"], tool_result=info["tool_result"],
            tool_results=info["tool_results"], messages=info["messages"],
            tools=info["tools"][:80], prompt_head=prompt[:200], prompt_tail=prompt[-200:],
            prompt_len=len(prompt), prompt_bytes=len(prompt.encode("utf-8")),
            prompt_sha256=hashlib.sha256(prompt.encode("utf-8")).hexdigest(),
            body_bytes=len(raw), action=act.get("action"),
            auth=("bearer" if (self.headers.get("Authorization") or "").lower().startswith("bearer")
                  else "x-api-key" if self.headers.get("x-api-key") else "none"),
            user_agent=self.headers.get("User-Agent", "")[:120],
        )
        delay = float(act.get("delay", self.state.scenario.get("delay", 0)) or 0)
        if delay > 0:  # a slow model, for spinner/timeout tests
            rec["delay"] = delay
            time.sleep(delay)
        try:
            if act["action"] == "rate_limit":
                rec["status"] = self._rate_limit(api)
                if self.state.reset_at is not None:
                    rec["reset_at"] = self.state.reset_at
            elif act["action"] == "error":
                status = int(act.get("status", 500))
                rec["status"] = status
                self._error(api, status, act.get("message", "stand-in error"))
            else:
                rec["status"] = 200
                if act["action"] == "tool":
                    tool, args = pick_tool(api, info["tools"], act["command"],
                                           act.get("risk_level",
                                                   self.state.scenario.get("risk_level", "low")))
                    rec["tool"] = tool
                    rec["tool_args"] = args
                    self._answer(api, info, body, tool=(tool, args))
                else:
                    rec["text"] = act.get("text", "")[:200]
                    self._answer(api, info, body, text=act.get("text", ""))
        except (BrokenPipeError, ConnectionResetError) as e:
            rec["client_gone"] = str(e)
        self.state.log(rec)

    # ---- errors and rate limits ------------------------------------------------------------

    def _error(self, api: str, status: int, message: str, headers: dict | None = None,
               etype: str | None = None, code: str | None = None) -> None:
        if api == "anthropic":
            etype = etype or {429: "rate_limit_error", 529: "overloaded_error",
                              401: "authentication_error"}.get(status, "api_error")
            self._send_json(status, {"type": "error", "error": {"type": etype, "message": message}},
                            headers)
        else:
            etype = etype or {429: "rate_limit_exceeded", 401: "invalid_request_error"}.get(
                status, "server_error")
            err = {"message": message, "type": etype, "param": None, "code": code or etype}
            self._send_json(status, {"error": err}, headers)

    def _rate_limit(self, api: str) -> int:
        rl = self.state.rate_limit
        kind = rl.get("kind", "429")
        status = int(rl.get("status", 429))
        retry_after = rl.get("retry_after", 1)
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        if rl.get("no_retry"):
            headers["x-should-retry"] = "false"
        if kind == "quota":
            # A provider's quota message with its reset time as a time of day (UTC, to the
            # second), in the API's error shape: droid gives up at once on "quota exhausted" /
            # "limit will reset at <time>" instead of retrying (a plain 429 it retries ~80 s).
            with self.state.lock:
                if self.state.reset_at is None:
                    self.state.reset_at = time.time() + float(rl.get("resets_in", 5))
                reset = self.state.reset_at
            when = time.strftime("%H:%M:%S UTC", time.gmtime(math.ceil(reset)))
            msg = rl.get("message", "Usage quota exhausted for this key. Your limit will reset "
                                    "at {reset}.").replace("{reset}", when)
            self._error(api, status, msg, headers, code=rl.get("code"))
            return status
        if kind == "usage_limit":
            with self.state.lock:
                if self.state.reset_at is None:
                    self.state.reset_at = time.time() + float(rl.get("resets_in", 5))
                reset = int(self.state.reset_at + 0.999)
            if api == "anthropic":
                # Claude Code reads these on a 429 and, when logged in with a subscription-style
                # (OAuth) token, emits {"type":"rate_limit_event","rate_limit_info":{...}}.
                headers.update({
                    "anthropic-ratelimit-unified-status": "rejected",
                    "anthropic-ratelimit-unified-reset": str(reset),
                    "anthropic-ratelimit-unified-representative-claim":
                        rl.get("rate_limit_type", "five_hour"),
                    "anthropic-ratelimit-unified-fallback": "unavailable",
                    "anthropic-ratelimit-unified-overage-status": "rejected",
                    "anthropic-ratelimit-unified-overage-disabled-reason": "out_of_credits",
                    "x-should-retry": "false",
                })
                headers.pop("retry-after", None)
                self._error(api, status, rl.get("message", "Rate limited (stand-in usage limit)"),
                            headers)
            elif api == "chat":
                # Copilot CLI in offline/BYOK mode treats every 429 alike: it retries 5 times
                # (about 1 s apart), then prints session.error{errorType:"rate_limit"} whose
                # message ends with the server's message, and exits 1. So: a quota-style message.
                headers = {"retry-after": str(rl.get("retry_after", 0))}
                data = {"error": {"message": rl.get(
                    "message", "You've hit your session rate limit. Please wait for your limit "
                    "to reset."), "code": "user_global_rate_limited", "type": "rate_limited"}}
                self._send_json(status, data, headers)
            else:
                # Codex: code usage_limit_reached with resets_at (no retry; "You've hit your
                # usage limit. ... try again at <time>.").
                err_headers = dict(headers)
                err_headers["x-codex-primary-used-percent"] = "100"
                err_headers["x-codex-primary-reset-after-seconds"] = str(max(0, reset - int(time.time())))
                data = {"error": {"type": "usage_limit_reached", "code": "usage_limit_reached",
                                  "message": rl.get("message", "You've hit your usage limit."),
                                  "plan_type": "plus", "resets_at": reset,
                                  "resets_in_seconds": max(0, reset - int(time.time()))}}
                self._send_json(status, data, err_headers)
            return status
        if kind == "quota_reset":
            # A provider quota with its reset time in the message (Qwen Code fails at once on
            # "quota" + "exhausted"/"exceeded" + "will reset"/"reset at", after its OpenAI
            # client's own retries). `{reset}` in a custom message is the reset time, RFC 3339.
            with self.state.lock:
                if self.state.reset_at is None:
                    self.state.reset_at = time.time() + float(rl.get("resets_in", 5))
                reset = int(self.state.reset_at + 0.999)
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
            headers.update({k: str(v) for k, v in (rl.get("headers") or {}).items()})
            msg = rl.get("message", "Your free quota is exhausted; it will reset at {reset}.")
            self._error(api, status, msg.replace("{reset}", when), headers,
                        code=rl.get("code", "insufficient_quota"))
            return status
        headers.update({k: str(v) for k, v in (rl.get("headers") or {}).items()})
        if rl.get("body") is not None:  # a verbatim error body, for experiments
            self._send_json(status, rl["body"], headers)
            return status
        msg = rl.get("message", "Rate limit exceeded (stand-in). Please retry later.")
        self._error(api, status, msg, headers, code=rl.get("code"))
        return status

    # ---- normal answers ------------------------------------------------------------------

    def _answer(self, api: str, info: dict, body: dict, text: str | None = None, tool=None) -> None:
        model = info["model"] or self.state.scenario.get("model", "standin-model")
        # Token counts: about 4 bytes a token, unless the scenario fixes them ("usage").
        fixed = self.state.scenario.get("usage") or {}
        in_tokens = int(fixed.get("input_tokens",
                                  max(1, int(self.headers.get("Content-Length") or 400) // 4)))
        self.out_tokens = int(fixed.get("output_tokens", 12))
        if api == "anthropic":
            self._anthropic(model, in_tokens, info["stream"], text, tool)
        elif api == "chat":
            self._chat(model, in_tokens, info["stream"], text, tool)
        else:
            self._responses(model, in_tokens, info["stream"], text, tool)

    def _anthropic(self, model, in_tokens, stream, text, tool) -> None:
        msg_id = rid("msg_")
        out_tokens = self.out_tokens
        if tool:
            name, args = tool
            block = {"type": "tool_use", "id": rid("toolu_"), "name": name, "input": args}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": text or ""}
            stop = "end_turn"
        usage = {"input_tokens": in_tokens, "output_tokens": out_tokens,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not stream:
            self._send_json(200, {"id": msg_id, "type": "message", "role": "assistant",
                                  "model": model, "content": [block], "stop_reason": stop,
                                  "stop_sequence": None, "usage": usage})
            return
        self._start_sse({"request-id": rid("req_")})
        self._event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": dict(usage, output_tokens=1)}})
        self._event("ping", {"type": "ping"})
        if tool:
            start = dict(block, input={})
            self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": start})
            js = json.dumps(block["input"])
            mid = len(js) // 2
            for part in (js[:mid], js[mid:]):
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                            "delta": {"type": "input_json_delta", "partial_json": part}})
        else:
            self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}})
            for part in _split_text(block["text"]):
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": part}})
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": out_tokens}})
        self._event("message_stop", {"type": "message_stop"})
        self._end_chunks()

    def _chat(self, model, in_tokens, stream, text, tool) -> None:
        cid = rid("chatcmpl-")
        created = int(time.time())
        usage = {"prompt_tokens": in_tokens, "completion_tokens": self.out_tokens,
                 "total_tokens": in_tokens + self.out_tokens}
        if tool:
            name, args = tool
            call = {"id": rid("call_"), "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": text or ""}
            finish = "stop"
        if not stream:
            self._send_json(200, {"id": cid, "object": "chat.completion", "created": created,
                                  "model": model, "choices": [{"index": 0, "message": message,
                                                               "finish_reason": finish}],
                                  "usage": usage})
            return

        def chunk(label, delta, finish_reason=None):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created,
                   "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            self._event(label, obj, named=False)

        self._start_sse()
        if tool:
            call = message["tool_calls"][0]
            chunk("chat.tool_call_start", {"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]})
            a = call["function"]["arguments"]
            mid = len(a) // 2
            for part in (a[:mid], a[mid:]):
                chunk("chat.tool_call_delta",
                      {"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
        else:
            chunk("chat.role", {"role": "assistant", "content": ""})
            for part in _split_text(text or ""):
                chunk("chat.content", {"content": part})
        chunk("chat.finish", {}, finish)
        # usage-only chunk (stream_options.include_usage style)
        self._event("chat.usage", {"id": cid, "object": "chat.completion.chunk",
                                   "created": created, "model": model, "choices": [],
                                   "usage": usage}, named=False)
        self._event("chat.done", "[DONE]", named=False)
        self._end_chunks()

    def _responses(self, model, in_tokens, stream, text, tool) -> None:
        resp_id = rid("resp_")
        created = int(time.time())
        usage = {"input_tokens": in_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": self.out_tokens,
                 "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": in_tokens + self.out_tokens}
        if tool:
            name, args = tool
            item = {"type": "function_call", "id": rid("fc_"), "call_id": rid("call_"),
                    "name": name, "arguments": json.dumps(args), "status": "completed"}
        else:
            item = {"type": "message", "id": rid("msg_"), "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text or "", "annotations": []}]}
        base = {"id": resp_id, "object": "response", "created_at": created, "model": model,
                "status": "in_progress", "output": []}
        done = dict(base, status="completed", output=[item], usage=usage)
        if not stream:
            self._send_json(200, done)
            return
        seq = iter(range(10_000))

        def ev(name, obj):
            obj = dict(obj, type=name, sequence_number=next(seq))
            self._event(name, obj)

        self._start_sse({"x-request-id": rid("req_")})
        ev("response.created", {"response": base})
        ev("response.in_progress", {"response": base})
        if tool:
            added = dict(item, arguments="", status="in_progress")
            ev("response.output_item.added", {"output_index": 0, "item": added})
            ev("response.function_call_arguments.delta",
               {"output_index": 0, "item_id": item["id"], "delta": item["arguments"]})
            ev("response.function_call_arguments.done",
               {"output_index": 0, "item_id": item["id"], "arguments": item["arguments"]})
            ev("response.output_item.done", {"output_index": 0, "item": item})
        else:
            t = item["content"][0]["text"]
            added = dict(item, status="in_progress", content=[])
            ev("response.output_item.added", {"output_index": 0, "item": added})
            ev("response.content_part.added", {"output_index": 0, "item_id": item["id"],
                                               "content_index": 0,
                                               "part": {"type": "output_text", "text": "",
                                                        "annotations": []}})
            for part in _split_text(t):
                ev("response.output_text.delta", {"output_index": 0, "item_id": item["id"],
                                                  "content_index": 0, "delta": part})
            ev("response.output_text.done", {"output_index": 0, "item_id": item["id"],
                                             "content_index": 0, "text": t})
            ev("response.content_part.done", {"output_index": 0, "item_id": item["id"],
                                              "content_index": 0, "part": item["content"][0]})
            ev("response.output_item.done", {"output_index": 0, "item": item})
        ev("response.completed", {"response": done})
        self._end_chunks()


def _split_text(t: str) -> list[str]:
    if len(t) < 8:
        return [t]
    mid = len(t) // 2
    return [t[:mid], t[mid:]]


def pick_tool(api: str, offered: list[str], command: str,
              risk_level: str = "low") -> tuple[str, dict]:
    """Choose the shell tool the client offered and build its arguments (`risk_level`: droid's
    rating of the call, which its `--auto` level is held against)."""
    names = set(offered)
    if "Execute" in names:  # droid
        return "Execute", {"command": command, "summary": "Check the first unchecked criterion",
                           "riskLevel": risk_level,
                           "riskLevelReason": f"stand-in: rated {risk_level}"}
    if api == "anthropic":
        name = "Bash" if "Bash" in names or not names else next(
            (n for n in offered if n.lower() == "bash"), "Bash")
        return name, {"command": command, "description": "Check the first unchecked criterion"}
    if api == "chat":
        for n in ("bash", "shell", "run_in_terminal", "powershell"):
            if n in names:
                return n, {"command": command,
                           "description": "Check the first unchecked criterion"}
        if "run_shell_command" in names:  # Qwen Code
            return "run_shell_command", {"command": command,
                                         "description": "Check the first unchecked criterion",
                                         "is_background": False}
        return "bash", {"command": command, "description": "Check the first unchecked criterion"}
    # responses (Codex)
    if "exec_command" in names:
        return "exec_command", {"cmd": command}
    if "shell_command" in names:
        return "shell_command", {"command": command}
    if "shell" in names:
        return "shell", {"command": ["bash", "-lc", command]}
    return "exec_command", {"cmd": command}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", help="scenario JSON file (see README.md)")
    ap.add_argument("--port-file", help="write the port number here once listening")
    ap.add_argument("--log", help="append one JSON object per request here (JSON Lines)")
    ap.add_argument("--dump-dir", help="save every raw request body here (debugging)")
    ap.add_argument("--idle-timeout", type=float, default=None,
                    help="exit after this many seconds without a request (default 120)")
    ap.add_argument("--max-requests", type=int, default=None,
                    help="exit after answering this many requests (default 500)")
    ap.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    args = ap.parse_args(argv)

    scenario = {}
    if args.scenario:
        with open(args.scenario, encoding="utf-8") as f:
            scenario = json.load(f)
    idle = args.idle_timeout if args.idle_timeout is not None else float(
        scenario.get("idle_timeout", 120))
    max_req = args.max_requests if args.max_requests is not None else int(
        scenario.get("max_requests", 500))
    if args.dump_dir:
        os.makedirs(args.dump_dir, exist_ok=True)

    state = State(scenario, args.log, args.dump_dir, max_req)
    Handler.state = state
    httpd = ThreadingHTTPServer((HOST, args.port), Handler)
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"PORT {port}", flush=True)

    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    reason = "idle"
    try:
        while True:
            if state.done.wait(0.2):
                reason = "max-requests"
                time.sleep(0.3)  # let the last response finish
                break
            if time.monotonic() - state.last_activity > idle:
                break
    except KeyboardInterrupt:
        reason = "interrupt"
    httpd.shutdown()
    httpd.server_close()
    print(f"EXIT {reason} after {state.n} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
