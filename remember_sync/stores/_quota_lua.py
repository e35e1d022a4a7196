"""Lua scripts of per-owner quotas on Redis-protocol stores.

An *owner* is an opaque tag the core passes with a write (a keyed hash of the
principal; the store knows nothing of identities).  Its usage ledger is two
keys named after the tag: ``owner`` (a sorted set: members are the owner's
storage keys, scores their deadlines in the server's epoch milliseconds,
:data:`~remember_sync.stores._index_lua.PERSISTENT_SCORE` for an entry without
one) and ``owner + "#sizes"`` (a hash: each member's bytes -- the UTF-8 length
of key and value -- and, under the empty field, their sum).  The entry count
is the sorted set's size.  Both keys expire with the owner's latest deadline
(plus :data:`LEDGER_SLACK_MS`), and persist while an entry without one is held.

Expired members leave the ledger inside the write scripts, before a write
would be refused: all of them go (each member is pruned once, so that work
is amortised over the writes that added them) and the write is judged again.
An expired entry therefore never counts against its owner, and a ledger never
holds much more than its quota.

Standalone servers and Vercel KV check, write and account in one script: the
existing write scripts (:mod:`~remember_sync.stores._index_lua`'s
``SET_INDEXED`` and ``CAS_INDEXED``, or a plain ``SET`` / compare-and-set)
run unchanged inside a function, between the quota check and the accounting
(:func:`quota_write`).  Deletes drop the keys from the ledger in the same
script as the ``UNLINK``.  A refused write returns :data:`OVER_ENTRIES` or
:data:`OVER_BYTES` and writes nothing.

Redis Cluster keeps the ledger and the entry in different hash slots, so the
write is two steps (see ``docs/many-users.rst``): :data:`RESERVE` checks and
accounts the new entry on the ledger's node *before* the write; if the write
does not happen (an ``NX`` or compare-and-set that lost, an error),
:data:`RESTORE` puts back what the reservation replaced, unless another
writer changed that member since.  Concurrent writers of one owner serialise
on the ledger's node, so the quota is never exceeded; a writer that dies
between the steps leaves its reservation counted until the entry's deadline
(or until the key is forgotten).  Deletes drop the keys from the ledger after
the ``UNLINK`` (:data:`DROP`): for that moment the owner is charged for
entries already gone, never the reverse.
"""

from __future__ import annotations

from . import _index_lua as index_lua
from .base import CAS_LUA_SCRIPT

#: A refused write's reply: the owner's entry quota would be exceeded.
OVER_ENTRIES = -1
#: A refused write's reply: the owner's byte quota would be exceeded.
OVER_BYTES = -2
#: How long a ledger outlives its owner's latest deadline.
LEDGER_SLACK_MS = 60_000
#: At most one pass per owner in this long over the ledger for entries that are gone.
RECONCILE_MS = 60_000


def sizes_key(owner: str) -> str:
    """The hash of member sizes beside *owner*'s sorted set (the same hash slot)."""
    return owner + "#sizes"


_QUOTA_HELPERS = f"""\
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function q_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function q_prune(z, h, now, limit)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, limit)
  if #gone == 0 then return 0 end
  local sizes = redis.call('HMGET', h, unpack(gone))
  local freed = 0
  for i = 1, #gone do freed = freed + (tonumber(sizes[i]) or 0) end
  redis.call('ZREM', z, unpack(gone))
  redis.call('HDEL', h, unpack(gone))
  if freed ~= 0 then redis.call('HINCRBY', h, '', -freed) end
  return #gone
end
local function q_verdict(z, h, member, size, max_n, max_b)
  local got = redis.call('HMGET', h, '', member)
  local count, total = redis.call('ZCARD', z), tonumber(got[1]) or 0
  if got[2] then count = count - 1; total = total - tonumber(got[2]) end
  if max_n >= 0 and count + 1 > max_n then return {OVER_ENTRIES}, got[2] end
  if max_b >= 0 and total + size > max_b then return {OVER_BYTES}, got[2] end
  return 0, got[2]
end
-- After a change: the ledger lives until its latest deadline plus the slack.
local function q_lifetime(z, h)
  local top = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #top == 0 then
    redis.call('UNLINK', z, h)
  elseif tonumber(top[2]) >= {index_lua.PERSISTENT_SCORE} then
    redis.call('PERSIST', z); redis.call('PERSIST', h)
  else
    local at = math.floor(tonumber(top[2])) + {LEDGER_SLACK_MS}
    redis.call('PEXPIREAT', z, at); redis.call('PEXPIREAT', h, at)
  end
end
-- After adding a member with *score*: extend the ledger's life if it would end before.
local function q_extend(z, h, score, now)
  local ttl = redis.call('PTTL', z)
  if score >= {index_lua.PERSISTENT_SCORE} then
    if ttl ~= -1 then redis.call('PERSIST', z); redis.call('PERSIST', h) end
  elseif ttl == -1 or now + ttl < score + {LEDGER_SLACK_MS} then
    q_lifetime(z, h)
  end
end
-- Charge *member* (*old*: its previous size, or false) with the deadline PX ms from *now*.
local function q_account(z, h, member, size, px, now, old)
  local score = {index_lua.PERSISTENT_SCORE}
  if px ~= '' then score = now + tonumber(px) end
  old = tonumber(old) or 0
  redis.call('ZADD', z, score, member)
  redis.call('HSET', h, member, size)
  if size ~= old then redis.call('HINCRBY', h, '', size - old) end
  q_extend(z, h, score, now)
  return score
end
local function q_drop(z, h, members)
  if #members == 0 then return end
  local sizes = redis.call('HMGET', h, unpack(members))
  local freed = 0
  for i = 1, #members do freed = freed + (tonumber(sizes[i]) or 0) end
  if redis.call('ZREM', z, unpack(members)) == 0 then return end
  redis.call('HDEL', h, unpack(members))
  if freed ~= 0 then redis.call('HINCRBY', h, '', -freed) end
  q_lifetime(z, h)
end
-- Members whose entry is gone (deleted by something that kept no ledger: another
-- program, an erasure) go too, in one pass over the ledger at most once per
-- RECONCILE_MS per owner; only where the script may read the entries (not on a
-- cluster, where *entries* is false).
local function q_reconcile(z, h, now)
  local last = tonumber(redis.call('HGET', h, '\\0reconciled')) or 0
  if now - last < {RECONCILE_MS} then return 0 end
  redis.call('HSET', h, '\\0reconciled', now)
  local members, gone = redis.call('ZRANGE', z, 0, -1), {{}}
  for _, m in ipairs(members) do
    if redis.call('EXISTS', m) == 0 then gone[#gone + 1] = m end
  end
  for i = 1, #gone, 1000 do q_drop(z, h, {{unpack(gone, i, math.min(i + 999, #gone))}}) end
  return #gone
end
-- The verdict (0, or why the write is refused), the time and the member's old size.
-- Expired members count until a write would be refused: then every one of them goes
-- (each is pruned once, so that work is amortised), and where *entries* allows, the
-- members without an entry (q_reconcile); then the write is judged again.  A ledger
-- therefore never holds more than its quota.
local function q_check(z, h, member, size, max_n, max_b, entries)
  local now = q_now()
  if max_n < 0 and max_b < 0 then return 0, now, redis.call('HGET', h, member) end
  local v, old = q_verdict(z, h, member, size, max_n, max_b)
  if v ~= 0 then
    local freed = 0
    while true do
      local n = q_prune(z, h, now, 1000)
      if n == 0 then break end
      freed = freed + n
    end
    if entries then freed = freed + q_reconcile(z, h, now) end
    if freed > 0 then v, old = q_verdict(z, h, member, size, max_n, max_b) end
  end
  return v, now, old
end
"""

#: A plain (unindexed) write, with SET_INDEXED's contract minus the index:
#: KEYS = entry; ARGV = value, PX ms or "", "1" for NX.  Returns 1 if written.
_SET_PLAIN = """\
local args = {'SET', KEYS[1], ARGV[1]}
if ARGV[2] ~= '' then args[4] = 'PX'; args[5] = ARGV[2] end
if ARGV[3] == '1' then args[#args + 1] = 'NX' end
if redis.call(unpack(args)) then return 1 end
return 0
"""


def quota_write(body: str, *, value_at: int, px_at: int) -> str:
    """A write script *body* (unchanged) between a quota check and the accounting.

    *body* reads ``KEYS[1]`` (the entry) and returns 1 when it wrote.  The
    quota script's keys are the ledger (sorted set, sizes hash) followed by
    the body's keys; its arguments are the entry and byte quotas (``-1``:
    none) followed by the body's (the value at the body's ``ARGV[value_at]``,
    the PX at ``ARGV[px_at]``).  The body sees its own keys and arguments
    under the names it was written with, whatever their number (a
    compare-and-set's marker and token are optional).  Returns the body's
    reply, or :data:`OVER_ENTRIES` / :data:`OVER_BYTES` with nothing written.
    """
    return (
        _QUOTA_HELPERS
        + "local BK, BA = {unpack(KEYS, 3)}, {unpack(ARGV, 3)}\n"
        # The body's own KEYS and ARGV: parameters shadowing the script's.
        + f"local function q_write(KEYS, ARGV)\n{body}end\n"
        + f"""\
local z, h = KEYS[1], KEYS[2]
local size = string.len(BK[1]) + string.len(BA[{value_at}])
local max_n, max_b = tonumber(ARGV[1]), tonumber(ARGV[2])
local v, now, old = q_check(z, h, BK[1], size, max_n, max_b, true)
if v ~= 0 then return v end
local r = q_write(BK, BA)
if r == 1 then q_account(z, h, BK[1], size, BA[{px_at}], now, old) end
return r
"""
    )


#: Deletes with the ledger: KEYS = ledger (2), entries.  Returns how many existed.
DELETE = _QUOTA_HELPERS + """\
local members = {unpack(KEYS, 3)}
local n = redis.call('UNLINK', unpack(members))
q_drop(KEYS[1], KEYS[2], members)
return n
"""

#: Indexed deletes with the ledger: KEYS = ledger (2), index, entries (DELETE_INDEXED's
#: contract after the ledger).  Returns how many existed.
DELETE_INDEXED = (
    _QUOTA_HELPERS
    + "local DK = {unpack(KEYS, 3)}\n"
    + "local function q_delete()\n"
    + index_lua.DELETE_INDEXED.replace("KEYS", "DK")
    + "end\n"
    + """\
local n = q_delete()
q_drop(KEYS[1], KEYS[2], {unpack(KEYS, 4)})
return n
"""
)

#: Cluster, step one of a write: check and account on the ledger's node.  KEYS =
#: ledger (2); ARGV = member, size, PX ms or "", entry quota, byte quota.  Returns
#: {verdict (0, OVER_ENTRIES, OVER_BYTES), new score, old size or "", old score or ""}.
RESERVE = _QUOTA_HELPERS + """\
local z, h, member, size = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local v, now, old = q_check(z, h, member, size, tonumber(ARGV[4]), tonumber(ARGV[5]), false)
if v ~= 0 then return {v, '', '', ''} end
local old_score = redis.call('ZSCORE', z, member) or ''
local score = q_account(z, h, member, size, ARGV[3], now, old)
return {0, tostring(score), old or '', old_score}
"""

#: Cluster: undo a reservation whose write did not happen.  KEYS = ledger (2); ARGV =
#: member, reserved size, reserved score, old size or "", old score or "".  Leaves
#: the member alone when another writer changed it since.  Returns 1 if undone.
RESTORE = _QUOTA_HELPERS + """\
local z, h, member = KEYS[1], KEYS[2], ARGV[1]
local size, score = redis.call('HGET', h, member), redis.call('ZSCORE', z, member)
if size ~= ARGV[2] or not score or tonumber(score) ~= tonumber(ARGV[3]) then return 0 end
if ARGV[4] == '' then
  q_drop(z, h, {member})
else
  redis.call('ZADD', z, ARGV[5], member)
  redis.call('HSET', h, member, ARGV[4])
  redis.call('HINCRBY', h, '', tonumber(ARGV[4]) - tonumber(size))
  q_lifetime(z, h)
end
return 1
"""

#: Cluster, after the UNLINK: drop members from the ledger.  KEYS = ledger (2); ARGV = members.
DROP = _QUOTA_HELPERS + """\
q_drop(KEYS[1], KEYS[2], ARGV)
return 1
"""

#: The ledger's usage: KEYS = ledger (2).  Expired members are pruned first.
#: Returns {entries, bytes}.
USAGE = _QUOTA_HELPERS + """\
while q_prune(KEYS[1], KEYS[2], q_now(), 1000) > 0 do end
q_lifetime(KEYS[1], KEYS[2])
return {redis.call('ZCARD', KEYS[1]), tonumber(redis.call('HGET', KEYS[2], '')) or 0}
"""

#: Every script by name (``QUOTA_`` + the write it wraps, or the step it is).
SCRIPTS = {
    # Every write: KEYS = ledger (2), then the wrapped script's; ARGV = quotas (2), then its.
    # KEYS += entry; ARGV += value, PX, NX.
    "QUOTA_SET": quota_write(_SET_PLAIN, value_at=1, px_at=2),
    # KEYS += entry, index; ARGV += value, PX, NX.
    "QUOTA_SET_INDEXED": quota_write(index_lua.SET_INDEXED, value_at=1, px_at=2),
    # KEYS += entry; ARGV += expected, value, PX.
    "QUOTA_CAS": quota_write(CAS_LUA_SCRIPT, value_at=2, px_at=3),
    # KEYS += entry, marker; ARGV += expected, value, PX, token, window, "" (CAS_MARKED's).
    "QUOTA_CAS_MARKED": quota_write(index_lua.CAS_MARKED, value_at=2, px_at=3),
    # KEYS += entry, index[, marker]; ARGV += expected, value, PX[, token, window, ""].
    "QUOTA_CAS_INDEXED": quota_write(index_lua.CAS_INDEXED, value_at=2, px_at=3),
    "QUOTA_DELETE": DELETE,
    "QUOTA_DELETE_INDEXED": DELETE_INDEXED,
    "QUOTA_RESERVE": RESERVE,
    "QUOTA_RESTORE": RESTORE,
    "QUOTA_DROP": DROP,
    "QUOTA_USAGE": USAGE,
}
