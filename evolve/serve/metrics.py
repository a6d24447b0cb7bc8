"""Request counters and latency histograms in the Prometheus text exposition format (version 0.0.4)."""
from __future__ import annotations

import bisect
import threading
from collections import Counter

#: Latency histogram bucket bounds (seconds).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _labels(pairs: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs.items()) + "}" if pairs else ""


class Metrics:
    """Thread-safe counters of requests by route and status, and latency histograms by route."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self._hist: dict[str, list[int]] = {}
        self._sums: Counter[str] = Counter()
        self.counters: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, method, status)] += 1
            counts = self._hist.setdefault(route, [0] * (len(BUCKETS) + 1))
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sums[route] += seconds

    def count(self, name: str, n: int = 1, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            self.counters[(name, tuple(sorted((labels or {}).items())))] += n

    def render(self, gauges: list[tuple[str, str, dict[str, str], float]]) -> str:
        """The exposition text; ``gauges`` are ``(name, help, labels, value)`` read at scrape time."""
        out = ["# HELP memevolve_http_requests_total HTTP requests by route, method and status.",
               "# TYPE memevolve_http_requests_total counter"]
        with self._lock:
            for (route, method, status), n in sorted(self.requests.items()):
                labels = _labels({"route": route, "method": method, "status": str(status)})
                out.append(f"memevolve_http_requests_total{labels} {n}")
            out += ["# HELP memevolve_http_request_seconds Request latency by route.",
                    "# TYPE memevolve_http_request_seconds histogram"]
            for route, counts in sorted(self._hist.items()):
                running = 0
                for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts):
                    running += n
                    labels = _labels({"route": route, "le": bound})
                    out.append(f"memevolve_http_request_seconds_bucket{labels} {running}")
                out.append(f"memevolve_http_request_seconds_sum{_labels({'route': route})} {self._sums[route]:.6f}")
                out.append(f"memevolve_http_request_seconds_count{_labels({'route': route})} {running}")
            typed: set[str] = set()
            for (name, labels), n in sorted(self.counters.items()):
                if name not in typed:
                    out.append(f"# TYPE memevolve_{name}_total counter")
                    typed.add(name)
                out.append(f"memevolve_{name}_total{_labels(dict(labels))} {n}")
        seen: set[str] = set()
        for name, help_text, labels, value in gauges:
            if name not in seen:
                out += [f"# HELP memevolve_{name} {help_text}", f"# TYPE memevolve_{name} gauge"]
                seen.add(name)
            out.append(f"memevolve_{name}{_labels(labels)} {value:g}")
        return "\n".join(out) + "\n"
