"""What a running engine says about itself: its vLLM version, its GPU and its flags.

Read-only GETs, best effort, each endpoint where the engine offers it:
- `/version`: `{"version"}` (vLLM; `tuner sim serve` says `sim-<tuner version>`);
- `/v1/models`: the served model names and `max_model_len`;
- `/metrics`: `vllm:cache_config_info`, a gauge whose labels are vLLM's CacheConfig
  (vllm/v1/metrics/loggers.py, `log_metrics_info`: `block_size`, `gpu_memory_utilization`,
  `enable_prefix_caching`, `cache_dtype`, ...);
- `/server_info?config_format=json`: the whole `VllmConfig` and `collect_env`'s system info
  (GPU models, vLLM version), only when the engine runs with `VLLM_SERVER_DEV_MODE=1`
  (vllm/entrypoints/serve/dev/server_info/api_router.py, `show_server_info`).

Flags come back under vLLM's dash names (`max-num-batched-tokens`), so they compare with the
exported command's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from tuner.spec.values import Scalar
from tuner.tls import tls_context
from tuner.workload.client import request_headers

CONFIG_SECTIONS = ("model_config", "cache_config", "scheduler_config", "parallel_config")
# vLLM's config field for a flag whose name is not the field's (`--kv-cache-dtype`)
_FIELD_OF = {"kv-cache-dtype": "cache_dtype"}
_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class EngineInfo:
    version: str | None = None
    gpu: str | None = None  # as the engine names it (collect_env's nvidia_gpu_models)
    config: dict[str, object] = field(default_factory=dict)  # vLLM config field -> value
    env: dict[str, object] = field(default_factory=dict)  # VLLM_* variables it runs with
    sources: tuple[str, ...] = ()  # the endpoints that answered

    def flag(self, name: str) -> object:
        """The engine's value of flag `name` (dash or env name); None: not exposed."""
        if name.startswith("VLLM_"):
            return self.env.get(name)
        key = _FIELD_OF.get(name, name.replace("-", "_"))
        return self.config.get(key)

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "gpu": self.gpu,
            "config": self.config,
            "sources": list(self.sources),
        }


def read_engine_info(
    base_url: str, model: str, api_key: str | None, timeout_s: float = 10.0
) -> EngineInfo:
    """What the engine at `base_url` states about itself (nothing sent but GETs)."""
    url = base_url.rstrip("/")
    headers = request_headers(api_key)
    sources: list[str] = []
    config: dict[str, object] = {}
    env: dict[str, object] = {}
    version = gpu = None
    with httpx.Client(
        headers=headers, timeout=timeout_s, verify=tls_context(), trust_env=False
    ) as client:
        if (got := _json(client, url + "/version")) is not None:
            sources.append("/version")
            version = got.get("version") if isinstance(got, dict) else None
        text = _text(client, url + "/metrics")
        if text is not None and (labels := cache_config_labels(text)):
            sources.append("/metrics")
            config.update(labels)
        info = _json(client, url + "/server_info?config_format=json")
        if isinstance(info, dict) and isinstance(info.get("vllm_config"), dict):
            sources.append("/server_info")
            config.update(server_config(info["vllm_config"]))
            system = info.get("system_env") or {}
            gpu = system.get("nvidia_gpu_models") or None
            version = version or system.get("vllm_version")
            env = dict(info.get("vllm_env") or {})
        cards = _json(client, url + "/v1/models")
    for card in (cards or {}).get("data", []) if isinstance(cards, dict) else []:
        if isinstance(card, dict) and card.get("id") == model and card.get("max_model_len"):
            config["max_model_len"] = card["max_model_len"]
            sources.append("/v1/models")
    return EngineInfo(version, gpu, config, env, tuple(sources))


def cache_config_labels(text: str) -> dict[str, str]:
    """The labels of `vllm:cache_config_info` in a Prometheus text page ({} when absent)."""
    for line in text.splitlines():
        if m := _INFO.match(line):
            found = dict(_LABEL.findall(m.group("labels")))
            found.pop("engine", None)
            return {k: v for k, v in found.items() if v not in ("None", "")}
    return {}


def server_config(vllm_config: Mapping[str, object]) -> dict[str, Scalar]:
    """The scalar fields of `/server_info`'s config sections, field name -> value."""
    out: dict[str, Scalar] = {}
    for section in CONFIG_SECTIONS:
        part = vllm_config.get(section)
        if isinstance(part, dict):
            out.update(
                {
                    k: v
                    for k, v in part.items()
                    if isinstance(v, str | int | float | bool) and k not in out
                }
            )
    return out


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        resp = client.get(url)
    except httpx.HTTPError:
        return None
    return resp if resp.status_code == 200 else None


def _json(client: httpx.Client, url: str) -> object:
    resp = _get(client, url)
    try:
        return resp.json() if resp is not None else None
    except ValueError:
        return None


def _text(client: httpx.Client, url: str) -> str | None:
    resp = _get(client, url)
    return resp.text if resp is not None else None
