"""LIST answers in protobuf laid out as kube-apiserver writes them, built byte by byte
(tests of read.kube.proto and read.kube.pages)."""

from __future__ import annotations

from autoscaler.read.kube import proto


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def delimited(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def envelope(
    version: str, token: str, remaining: int | None, items: list[bytes], kind: str
) -> bytes:
    """A LIST answer laid out as kube-apiserver writes it: runtime.Unknown's typeMeta,
    then its raw List (ListMeta first, then the items), then its contentType."""
    meta = delimited(2, version.encode())
    if token:
        meta += delimited(3, token.encode())
    if remaining is not None:
        meta += varint(4 << 3 | 0) + varint(remaining)
    listed = delimited(1, meta) + b"".join(delimited(2, item) for item in items)
    type_meta = delimited(1, b"v1") + delimited(2, kind.encode())
    unknown = delimited(1, type_meta) + delimited(2, listed)
    return proto.MAGIC + unknown + delimited(4, b"application/vnd.kubernetes.protobuf")
