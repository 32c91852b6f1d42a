"""``evalq certify RESULTS`` and ``evalq verify CERTIFICATE``: what they print and return
(the work is ``evalq.execute.certify``)."""

from __future__ import annotations

from pathlib import Path

from evalq.execute.certify import certify, verify


def certify_command(results: Path, *, probe: int = 32) -> int:
    written, notes = certify(results, probe=probe)
    for note in notes:
        print(f"note: {note}")
    for path in written:
        print(f"certificate written to {path}")
    if not written:
        print("no certificate: no candidate passed every gate with an in-process engine")
    return 0


def verify_command(certificate: Path, *, url: str | None = None,
                   model: str | None = None) -> int:
    """0 when this machine's engine (or the endpoint at ``url``) reproduces the
    certificate, 1 (naming the causes it can tell) when it does not."""
    found = verify(certificate, url=url, model=model)
    print(f"{found.variant}: min cosine {found.min_cosine:.7f} against the certified "
          f"vectors, tolerance 1 - cosine <= {found.tolerance:.2e}")
    for note in found.notes:
        print(f"note: {note} (the vectors still match)")
    if found.matched:
        print("MATCH: this deployment reproduces the certified candidate")
        return 0
    print("MISMATCH: this deployment does not reproduce the certified candidate")
    for cause in found.causes:
        print(f"  cause: {cause}")
    return 1
