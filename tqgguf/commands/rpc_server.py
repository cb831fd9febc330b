"""``tqgguf rpc-server``: run llama.cpp's RPC worker (ggml-rpc-server) built from the patched
tree, so it knows the turbo types; clients use it with ``--rpc HOST:PORT``.

A thin layer: check the flags and the port, say what is served where, then replace this
process with the worker (``os.execv``), so stopping it stops the worker and nothing is left
running. The RPC protocol has no authentication (llama.cpp's tools/rpc/README.md): anyone who
reaches the port can read and write the worker's memory. It binds 127.0.0.1 unless
``--host`` names another address together with ``--allow-remote``.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import sys

import click
from ..values import MAX_THREADS

DEFAULT_PORT = 50052  # llama.cpp's ggml-rpc-server default (tools/rpc/rpc-server.cpp)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command(name="rpc-server")
@click.option("-H", "--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Another address than loopback also needs --allow-remote.")
@click.option("-p", "--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True, help="Port to bind.")
@click.option("-d", "--device", "device", metavar="DEV[,...]", default=None,
              help="Devices the worker exposes, as `tqgguf info` names them (default: every GPU, else the CPU).")
@click.option("-t", "--threads", type=click.IntRange(1, MAX_THREADS), default=None, help="CPU threads for the CPU device.")
@click.option("-c", "--cache", "use_cache", is_flag=True,
              help="Keep received tensors in a local file cache (llama.cpp's -c; $LLAMA_CACHE/rpc), so a model "
                   "loads faster the next time.")
@click.option("--allow-remote", is_flag=True,
              help="Allow a --host other than loopback. The RPC protocol is unauthenticated: only on a network "
                   "you trust.")
def command(host, port, device, threads, use_cache, allow_remote):
    """Run a turbo-capable RPC worker for clients on other machines (or other processes):
    `tqgguf ppl|bench|serve ... --rpc HOST:PORT`. One worker serves one client at a time."""
    from ..builder.driver import rpc_server_path

    if ":" in host:
        raise click.UsageError(f"--host {host}: llama.cpp's RPC worker binds IPv4 addresses only; give an IPv4 "
                               "address (127.0.0.1, or this machine's address with --allow-remote)")
    if not _loopback(host) and not allow_remote:
        raise click.UsageError(
            f"--host {host} would expose the worker beyond this machine; the RPC protocol has no authentication "
            "(anyone who reaches the port can read and write its memory): add --allow-remote to do it on a network "
            "you trust, or keep the default 127.0.0.1")
    try:
        binary = rpc_server_path()
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None
    if device is not None:
        from ..cachetypes import EngineNotBuiltError
        from ..devices import list_devices

        try:
            have = [d.name for d in list_devices() if not d.name.startswith("RPC")]
        except EngineNotBuiltError as e:
            raise click.ClickException(str(e)) from None
        for name in device.split(","):
            if name not in have:
                raise click.UsageError(f"-d {device}: no device {name!r} here; devices: {', '.join(have)}")
    try:  # the worker would print "Failed to create server socket" and exit 0
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, port))
    except OSError as e:
        raise click.ClickException(f"cannot bind {host}:{port}: {e.strerror or e}") from None
    args = [str(binary), "-H", host, "-p", str(port)]
    if device:
        args += ["-d", device]
    if threads:
        args += ["-t", str(threads)]
    if use_cache:
        args.append("-c")
    where = f"{host}:{port}"
    click.echo(f"rpc-server: turbo-capable llama.cpp RPC worker ({binary.name} from the patched tree) on {where}; "
               f"clients: --rpc {where if not host.startswith(('0.0.0.0', '::')) else 'THIS_HOST:' + str(port)}", err=True)
    if not _loopback(host):
        click.echo(f"rpc-server: WARNING: bound to {host}, reachable from other machines; the RPC protocol is "
                   "unauthenticated — only on a network you trust", err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    os.execv(args[0], args)
