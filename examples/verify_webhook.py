"""Verify a finalizer webhook (README, "Actions").

The service signs each POST with X-Finalizer-Signature:
"sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)), where timestamp
is the X-Finalizer-Timestamp header (Unix seconds). Deduplicate by the event's
"id" (also in X-Finalizer-Event-Id): delivery is at least once.

As a script (used by the repository's tests):
    python3 verify_webhook.py SECRET TIMESTAMP SIGNATURE < body    # exit 0: valid
"""
import hashlib
import hmac
import sys
import time


def verify(secret: bytes, timestamp: str, signature: str, body: bytes, tolerance: int = 300, now=None) -> bool:
    """True when the signature is the secret's over timestamp and body, and
    the timestamp is within tolerance seconds of now (a replay fails)."""
    now = time.time() if now is None else now
    try:
        if abs(now - int(timestamp)) > tolerance:
            return False
    except ValueError:
        return False
    want = "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, signature)


if __name__ == "__main__":
    secret, ts, sig = sys.argv[1].encode(), sys.argv[2], sys.argv[3]
    sys.exit(0 if verify(secret, ts, sig, sys.stdin.buffer.read()) else 1)
