"""The Lua script of verified mode's atomic commit on Redis-protocol stores.

Verified mode (``docs/verified.rst``) keeps, per namespace, a sealed manifest
of what must exist.  On a standalone server, Sentinel's primary and Vercel KV
one script checks that the manifest is still the one the client computed
from, then writes the entries and the new manifest: a writer never leaves an
entry the manifest does not vouch for.  The store moves opaque strings; what
the manifest says is the client's business.
"""

from __future__ import annotations

from .base import SET_KEY_LUA, ManifestCommit

#: KEYS = manifest, entries...; ARGV = the expected manifest's token ("" when there is
#: none), new manifest, its PX ms or "", then per entry: value ("" deletes it), PX ms or
#: "".  Returns ``{1, ""}`` when written, else ``{0, <current manifest or "">}`` and
#: writes nothing.  A token is the start of a stored manifest, through its IV and GCM
#: tag (``remember_sync._integrity.token``): the request carries the manifest once, not
#: twice, and the server compares a hundred bytes instead of hashing the whole.
COMMIT_MANIFEST = """\
local current = redis.call('GET', KEYS[1]) or ''
if ARGV[1] == '' then
  if current ~= '' then return {0, current} end
elseif string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return {0, current}
end
for i = 2, #KEYS do
  local value, px = ARGV[2 * i], ARGV[2 * i + 1]
  if value == '' then
    redis.call('UNLINK', KEYS[i])
  elseif px == '' then
    redis.call('SET', KEYS[i], value)
  else
    redis.call('SET', KEYS[i], value, 'PX', px)
  end
end
""" + SET_KEY_LUA + """\
return {1, ''}
"""

#: KEYS = manifest, entries...; ARGV = the token of the manifest the caller holds, or
#: "".  Returns ``{1, "", values}`` when the stored manifest is that one, else
#: ``{0, <manifest or "">, values}``; values as MGET gives them.  Read-only.
READ_WITH_MANIFEST = """\
local current = redis.call('GET', KEYS[1])
local values = {}
if #KEYS > 1 then values = redis.call('MGET', unpack(KEYS, 2)) end
if not current then return {0, '', values} end
if ARGV[1] ~= '' and string.sub(current, 1, #ARGV[1]) == ARGV[1] then
  return {1, '', values}
end
return {0, current, values}
"""


#: KEYS = one entry; ARGV = the value it must hold ("" when it must be absent), the new
#: value ("" deletes it), its PX ms or "".  Returns 1 when written (or when the entry
#: already holds the new value: a resent script), else 0 (nothing written).  Step (2)
#: of a two-step write on Redis Cluster: an entry is written only over the version it
#: replaces, and no compare-and-set marker names the key.
REPLACE_ENTRY = """\
local current = redis.call('GET', KEYS[1])
if (current or '') == ARGV[2] then return 1 end
if ARGV[1] == '' then
  if current then return 0 end
elseif current ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('UNLINK', KEYS[1])
elseif ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
"""


def script_input(commit: ManifestCommit) -> tuple[list[str], list[str]]:
    """The ``KEYS`` and ``ARGV`` of :data:`COMMIT_MANIFEST` for *commit*."""
    keys = [commit.manifest_key]
    args = [commit.expected or "", commit.manifest, _px(commit.manifest_ttl_ms)]
    for key, value, ttl_ms in commit.writes:
        keys.append(key)
        args += [value or "", _px(ttl_ms)]
    return keys, args


def _px(ttl_ms: int | None) -> str:
    return "" if ttl_ms is None else str(ttl_ms)
