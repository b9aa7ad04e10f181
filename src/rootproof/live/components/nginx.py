"""A private nginx (Debian's /usr/sbin/nginx) in front of the order service.

Run in the foreground as `nginx -p <run>/nginx -e <error log> -c nginx.conf -g 'daemon off;'`
with its pid file, temp paths and logs inside the prefix. The access log uses the `upstream`
format the live nginx backend reads (`access_format: upstream` in the targets file: combined +
`$upstream_response_time $upstream_status`); `stub_status` is at `/nginx_status` (loopback only,
not logged). Everything else is proxied to the order service with `proxy_read_timeout` of
`LiveConfig.proxy_read_timeout_s`, which the order service's delay knob can exceed (a real
`upstream timed out (110: Connection timed out) while reading response header from upstream`
and a 504). When rootproof runs as root, the workers run as `nobody` and only handle sockets;
the master opens the logs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from rootproof.errors import LiveEnvironmentError
from rootproof.live.components.base import Component, Health, Started, http_health, spawn_process
from rootproof.live.layout import RunSpec

__all__ = ["LOG_FORMAT", "NginxComponent", "status_url"]

LOG_FORMAT = (
    "'$remote_addr - $remote_user [$time_local] \"$request\" '\n"
    "                        '$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" '\n"
    "                        '$upstream_response_time $upstream_status'"
)
"""The `upstream` log_format (docs/targets.md)."""


def status_url(spec: RunSpec) -> str:
    """The stub_status URL."""
    return f"http://127.0.0.1:{spec.port('nginx')}/nginx_status"


def _conf(spec: RunSpec) -> str:
    p = spec.paths
    prefix = p.nginx
    temp = "\n".join(f"    {k}_temp_path {prefix}/tmp/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""# rootproof live (run {spec.run_id})
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {p.nginx_error_log} warn;
events {{
    worker_connections 512;
}}
http {{
{temp}
    log_format upstream {LOG_FORMAT};
    access_log {p.nginx_access_log} upstream;
    upstream order_service {{
        server 127.0.0.1:{spec.port('order_service')};
        keepalive 8;
    }}
    server {{
        listen 127.0.0.1:{spec.port('nginx')};
        server_name localhost;
        location = /nginx_status {{
            stub_status;
            allow 127.0.0.1;
            deny all;
            access_log off;
        }}
        location / {{
            proxy_pass http://order_service;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Request-ID $request_id;
            proxy_connect_timeout 1s;
            proxy_read_timeout {spec.config.proxy_read_timeout_s}s;
        }}
    }}
}}
"""


class NginxComponent(Component):
    """nginx in the foreground, its master's pid recorded."""

    name = "nginx"
    binaries = ("nginx",)

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.nginx_error_log

    def _argv(self, spec: RunSpec) -> list[str]:
        p = spec.paths
        return [spec.binaries["nginx"], "-p", str(p.nginx), "-e", str(p.nginx_error_log), "-c", str(p.nginx_conf), "-g", "daemon off;"]

    def prepare(self, spec: RunSpec) -> None:
        p = spec.paths
        for sub in ("logs", "tmp"):
            (p.nginx / sub).mkdir(parents=True, exist_ok=True)
        p.nginx.chmod(0o755)
        p.nginx_conf.write_text(_conf(spec), encoding="utf-8")
        done = subprocess.run([*self._argv(spec), "-t", "-q"], capture_output=True, text=True, timeout=30, cwd=p.nginx)
        if done.returncode != 0:
            raise LiveEnvironmentError("nginx", f"nginx -t refused {p.nginx_conf}: {done.stderr.strip()[:500]}")

    def spawn(self, spec: RunSpec) -> Started:
        return spawn_process(self.name, self._argv(spec), cwd=spec.paths.nginx, log=spec.paths.nginx / "stdout.log")

    def health(self, spec: RunSpec) -> Health:
        return http_health(status_url(spec), expect="Active connections")
