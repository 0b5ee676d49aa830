"""Sample deltas: what changed between two JSON values, and that change applied to the older one.

Stdlib only, Python >= 3.8; shipped to the host (the agent makes deltas) and imported by the console's link
(which applies them) so that both sides share one definition of the format.

A patch is a JSON value of one of three shapes:

- ``["=", value]``: the new value, whole (a scalar that changed, a type that changed, a list of another length
  whose items are not dicts, anything new);
- ``["d", {key: patch}, [removed keys]]``: a dict of which only the keys named changed (no key added, the others
  in the same order: a dict whose keys are added or reordered is sent whole);
- ``["l", length, {"index": patch}]``: a list now ``length`` long, of which only the indices named changed (the
  ones beyond the old length are ``["=", item]``); the others are the old items.

``diff(a, b)`` is None when ``a`` and ``b`` are equal as JSON (``1`` and ``1.0`` and ``True`` are not: a type change
is a change; nor are two dicts whose keys come in another order). ``apply(a, patch)`` returns a new value and
never changes ``a``; the parts the patch leaves alone are ``a``'s own objects (the console reuses what it
validated of them). A patch that does not fit ``a`` raises ``BadDelta``: the caller asks for a whole sample
instead.

``digest(value)``: a CRC-32 of the value's marshal bytes (format 2). A delta carries ``changed_digest``: the
digest of the new values of the top-level keys its patch changes, so that the console can check that what it
rebuilt there is what the agent holds, byte for byte (the keys a patch leaves alone are the very objects of the
sample before, which was checked in its turn; a gap is caught by the sequence numbers, not by the digest). Only
the changed keys are encoded: encoding a whole sample costs more than the rest of a delta's work.
"""

import json
import marshal
import zlib


class BadDelta(ValueError):
    """A patch that does not apply to the value it was said to apply to."""


def same(a, b):
    """``a`` and ``b`` are equal as JSON, types included (no ``1 == True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for k, v in a.items():
            if k not in b or not same(v, b[k]):
                return False
        return True
    if isinstance(a, list):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if not same(x, y):
                return False
        return True
    if type(a) is float and a == 0.0 == b:
        return repr(a) == repr(b)  # -0.0 is not 0.0 as JSON ("-0.0" vs "0.0"): a sign change is a change
    return a == b or (a != a and b != b)  # NaN is NaN


def diff(a, b):
    """The patch that turns ``a`` into ``b``; None when nothing changed."""
    if type(a) is not type(b):
        return ["=", b]
    if isinstance(a, dict):
        if any(k not in a for k in b) or [k for k in a if k in b] != [k for k in b if k in a]:
            return ["=", b]  # keys added or in another order: whole, so that both sides hold the agent's order
        changed = {}
        for k, v in b.items():
            if k not in a:
                changed[k] = ["=", v]
            else:
                p = diff(a[k], v)
                if p is not None:
                    changed[k] = p
        removed = [k for k in a if k not in b]
        if not changed and not removed:
            return None
        return ["d", changed, removed]
    if isinstance(a, list):
        changed = {}
        for i, v in enumerate(b):
            if i >= len(a):
                changed[str(i)] = ["=", v]
            else:
                p = diff(a[i], v)
                if p is not None:
                    changed[str(i)] = p
        if not changed and len(a) == len(b):
            return None
        return ["l", len(b), changed]
    return None if same(a, b) else ["=", b]


def apply(a, patch):
    """``a`` with ``patch`` applied (a new value; ``a`` is left as it was). Raises BadDelta when it does not fit."""
    if not isinstance(patch, list) or not patch:
        raise BadDelta("not a patch: %r" % (patch,))
    tag = patch[0]
    if tag == "=" and len(patch) == 2:
        return patch[1]
    if tag == "d" and len(patch) == 3 and isinstance(a, dict) and isinstance(patch[1], dict) \
            and isinstance(patch[2], list):
        out = dict(a)
        for k in patch[2]:
            if k not in out:
                raise BadDelta("removes %r, which is not there" % (k,))
            del out[k]
        for k, p in patch[1].items():
            if type(p) is list and len(p) == 2 and p[0] == "=":
                out[k] = p[1]  # a new value, whole (inline: most of a sample's patches are such leaves)
            elif isinstance(p, list) and p and p[0] == "=":
                out[k] = apply(None, p)  # a malformed one: apply says why
            elif k in out:
                out[k] = apply(out[k], p)
            else:
                raise BadDelta("patches %r, which is not there" % (k,))
        return out
    if tag == "l" and len(patch) == 3 and isinstance(a, list) and isinstance(patch[1], int) \
            and not isinstance(patch[1], bool) and patch[1] >= 0 and isinstance(patch[2], dict):
        n = patch[1]
        items = list(a[:n])
        fresh = {}
        for key, p in patch[2].items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise BadDelta("not an index: %r" % (key,))
            if not 0 <= i < n:
                raise BadDelta("index %d outside a list of %d" % (i, n))
            fresh[i] = p
        if len(items) < n and any(i not in fresh for i in range(len(items), n)):
            raise BadDelta("grows the list to %d without its new items" % n)
        items.extend([None] * (n - len(items)))
        for i, p in fresh.items():
            if type(p) is list and len(p) == 2 and p[0] == "=":
                items[i] = p[1]
            else:
                items[i] = apply(items[i] if i < len(a) else None, p)
        return items
    raise BadDelta("a %r patch does not fit a %s" % (tag, type(a).__name__))


def digest(value):
    """CRC-32 of ``value``'s marshal bytes, format version 2: no back-references (those follow object identity and
    reference counts), so equal values give equal bytes on the agent (Python >= 3.8) and the console; floats as
    their exact bits, ``1``, ``1.0`` and ``True`` apart, dict keys in their order (``diff`` sends a dict whole when
    its keys are added or reordered, so both sides hold the agent's order). About a seventh of the cost of the
    canonical JSON it replaced (sorted keys), which was two thirds of the console's work on a delta."""
    return zlib.crc32(marshal.dumps(value, 2))


FULL_EVERY = 30
"""The agent sends a whole sample every this many ticks (and on connect, and when the console asks for one with
a ``snapshot`` request); the ticks between carry deltas."""


def changed_digest(value, patch):
    """The digest of what ``patch`` changed in ``value`` (the sample after it): the values of the top-level keys a
    ``d`` patch names (sorted), or the whole value for any other patch."""
    if isinstance(patch, list) and len(patch) == 3 and patch[0] == "d" and isinstance(patch[1], dict) \
            and isinstance(value, dict):
        return digest([[k, value.get(k)] for k in sorted(patch[1])])
    return digest(value)


def canonical(value):
    """``value`` as the console will read it back from JSON: the agent diffs against it, never against objects of
    its own that a later scan may change in place."""
    return json.loads(json.dumps(value, separators=(",", ":")))


class DeltaSender(object):
    """The agent's side: turns each sample into the message to push (a whole one or a delta of the last)."""

    def __init__(self, full_every=None):
        self.full_every = max(1, int(full_every or FULL_EVERY))
        self.seq = 0
        self.last = None
        self.since_full = 0

    def message(self, sample):
        """The ``sample`` or ``sample_delta`` message for ``sample`` (which is then the base of the next)."""
        self.seq += 1
        if self.last is None or self.since_full + 1 >= self.full_every:
            return self.full(sample, self.seq)
        now = canonical(sample)
        patch = diff(self.last, now)
        self.last = now
        self.since_full += 1
        return {"type": "sample_delta", "seq": self.seq, "base": self.seq - 1, "patch": patch,
                "digest": changed_digest(now, patch)}

    def full(self, sample, seq=None):
        """``sample`` whole, as the base of the next delta (``seq``: already counted, e.g. by ``message``)."""
        if seq is None:
            self.seq += 1
        self.last = canonical(sample)
        self.since_full = 0
        return {"type": "sample", "seq": self.seq, "data": sample}
