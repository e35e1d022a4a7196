"""Lua scripts of the per-namespace listing index on Redis-protocol stores.

An index is a sorted set: members are the namespace's full storage keys,
scores their deadlines in the server's epoch milliseconds
(:data:`PERSISTENT_SCORE` for an entry without one).  The index key's own
expiry follows its latest member (``PEXPIREAT`` at the highest score plus a
slack, ``PERSIST`` while a member has no deadline), so an index never outlives
its entries for good.

Standalone servers and Vercel KV run the write and its index upkeep in one
script (:data:`SET_INDEXED`, :data:`CAS_INDEXED`, :data:`DELETE_INDEXED`):
atomic, scored by the same clock that expires the entry.  Redis Cluster keeps
entry and index in different hash slots and uses the single-key scripts
:data:`INDEX_ADD` (sent with the write) and :data:`INDEX_PRUNE` (after a delete,
and for members a read or the periodic prune pass found without an entry), and
:data:`INDEX_EXPIRE` (the prune pass's expiry): see ``docs/redis.rst``.

Scripts that read entries named in their arguments rather than in ``KEYS``
(:data:`INDEX_PAGE`, :data:`REINDEX`) are for standalone servers and Vercel
KV only.
"""

from __future__ import annotations

#: The score of an entry that never expires (above any epoch-ms deadline, exact as a double).
PERSISTENT_SCORE = 9_000_000_000_000_000
#: How long an index outlives its latest deadline on a standalone server or Vercel KV.
STANDALONE_SLACK_MS = 1_000
#: Cluster: how long after its last add a member whose entry is missing is kept (a
#: writer between its two steps), and how long an index outlives its longest TTL.
CLUSTER_SLACK_MS = 60_000

_HELPERS = """\
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function extend_ttl(idx, score, slack)
  -- After adding a member with *score*: the index must live until score + slack.
  local ttl = redis.call('PTTL', idx)
  if ttl == -1 then
    if score < 9000000000000000 then
      local top = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
      if tonumber(top[2]) < 9000000000000000 then
        redis.call('PEXPIREAT', idx, math.floor(tonumber(top[2])) + slack)
      end
    end
  elseif score >= 9000000000000000 then
    redis.call('PERSIST', idx)
  elseif ttl >= 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if now + ttl < score + slack then
      redis.call('PEXPIREAT', idx, math.floor(score) + slack)
    end
  end
end
local function fix_ttl(idx, slack)
  local top = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
  if #top == 0 then return end
  local s = tonumber(top[2])
  if s >= 9000000000000000 then
    redis.call('PERSIST', idx)
  else
    redis.call('PEXPIREAT', idx, math.floor(s) + slack)
  end
end
"""

#: KEYS = entry, index; ARGV = value, PX ms or "", "1" for NX.  Returns 1 if written.
#: Every write script changes the index before the entry (``ZADD``/``ZREM`` first, a
#: ``ZSCORE`` when an NX write may not happen): an index the user may not write (ACL)
#: or that holds another type fails the script before anything is written.
#:
#: The write path itself, so it makes as few calls as it can (each ``redis.call`` costs
#: the server more than the command it runs): one ``TIME``, and the index's expiry in
#: one ``PEXPIREAT ... GT`` on Redis 7 (``GT`` treats a key without expiry as
#: infinite, so only then ``PTTL`` tells a new index -- expiry from its top member --
#: from one a member without deadline keeps; Redis 6.2 has no ``GT``: ``PTTL`` right
#: after ``TIME``, so that their sum is the index's expiry).
SET_INDEXED = """\
local seven = (redis.REDIS_VERSION_NUM or 0) >= 458752
if not seven and redis.replicate_commands then pcall(redis.replicate_commands) end
local entry, idx = KEYS[1], KEYS[2]
local args = {'SET', entry, ARGV[1]}
local score, now = 9000000000000000, 0
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  score = now + tonumber(ARGV[2])
  args[4] = 'PX'; args[5] = ARGV[2]
end
local ttl = -1
if not seven and score < 9000000000000000 then ttl = redis.call('PTTL', idx) end
if ARGV[3] == '1' then
  redis.call('ZSCORE', idx, entry)
  args[#args + 1] = 'NX'
  if not redis.call(unpack(args)) then return 0 end
  redis.call('ZADD', idx, score, entry)
else
  redis.call('ZADD', idx, score, entry)
  redis.call(unpack(args))
end
if score >= 9000000000000000 then
  if redis.call('PTTL', idx) >= 0 then redis.call('PERSIST', idx) end
  return 1
end
local expiry = score + 1000
if seven then
  if redis.call('PEXPIREAT', idx, expiry, 'GT') == 1 or redis.call('PTTL', idx) ~= -1 then
    return 1
  end
elseif ttl >= 0 then
  if now + ttl < expiry then redis.call('PEXPIREAT', idx, expiry) end
  return 1
end
local top = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
if tonumber(top[2]) < 9000000000000000 then
  redis.call('PEXPIREAT', idx, math.floor(tonumber(top[2])) + 1000)
end
return 1
"""

#: How long a compare-and-set marker remembers a write that landed: a resend of
#: it (after a lost reply) must arrive within this time to be recognised.
CAS_TOKEN_MS = 60_000

# A compare-and-set with a marker (KEYS: the entry's marker, a sorted set of the
# tokens of the writes that landed, scored by when): a resend of a write that
# landed answers 1 again instead of comparing (the entry may have changed since,
# by this write or another's); the marker forgets tokens after the window.
_TOKENS = """\
local function cas_landed(marker, token)
  return marker ~= nil and redis.call('ZSCORE', marker, token) ~= false
end
-- Whether the entry holds what the write expects: ARGV[6] == '1' means "absent"
-- (a create, as SET NX), else exactly ARGV[1].
local function cas_expected(entry)
  if ARGV[6] == '1' then return redis.call('EXISTS', entry) == 0 end
  return redis.call('GET', entry) == ARGV[1]
end
local function cas_record(marker, token, window)
  if marker == nil then return end
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', marker, '-inf', now - window)
  redis.call('ZADD', marker, now, token)
  redis.call('PEXPIRE', marker, window)
end
"""

#: KEYS = entry, index[, marker]; ARGV = expected, new value, PX ms or ""[, token,
#: window ms, "1" to expect no entry].  As CAS_LUA_SCRIPT; with a marker, a resent
#: write that landed returns 1.  A create checks the index (ZSCORE) first, as
#: SET_INDEXED does.
CAS_INDEXED = _HELPERS + _TOKENS + """\
if cas_landed(KEYS[3], ARGV[4]) then return 1 end
if ARGV[6] == '1' then redis.call('ZSCORE', KEYS[2], KEYS[1]) end
if not cas_expected(KEYS[1]) then return 0 end
local score, args = 9000000000000000, {'SET', KEYS[1], ARGV[2]}
if ARGV[3] ~= '' then
  args[4] = 'PX'; args[5] = ARGV[3]
  score = now_ms() + tonumber(ARGV[3])
end
redis.call('ZADD', KEYS[2], score, KEYS[1])
redis.call(unpack(args))
extend_ttl(KEYS[2], score, 1000)
cas_record(KEYS[3], ARGV[4], tonumber(ARGV[5]))
return 1
"""

#: KEYS = entry, marker; ARGV = expected, new value, PX ms or "", token, window ms,
#: "1" to expect no entry.  CAS_LUA_SCRIPT with a marker (an entry without index,
#: or a cluster's second step).
CAS_MARKED = _HELPERS + _TOKENS + """\
if cas_landed(KEYS[2], ARGV[4]) then return 1 end
if not cas_expected(KEYS[1]) then return 0 end
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
cas_record(KEYS[2], ARGV[4], tonumber(ARGV[5]))
return 1
"""

#: KEYS = index, entries...  Drops the entries from the index, unlinks them.
DELETE_INDEXED = _HELPERS + """\
redis.call('ZREM', KEYS[1], unpack(KEYS, 2))
local n = redis.call('UNLINK', unpack(KEYS, 2))
fix_ttl(KEYS[1], 1000)
return n
"""

#: One page of an index with the values (Vercel KV: one request).  KEYS = index;
#: ARGV = cursor, glob over members, count, "1" to prune first.  Pruning looks at
#: members whose score has passed: gone ones leave the index, live ones (a TTL
#: changed by a writer that does not keep the index) get their real deadline.
#: Members whose value is missing (deleted without the index, another type) are
#: removed: the script is atomic, nothing can write them in between.
#: Returns {next cursor, keys, values}.
INDEX_PAGE = _HELPERS + """\
local idx = KEYS[1]
if ARGV[4] == '1' then
  local now = now_ms()
  local due = redis.call('ZRANGEBYSCORE', idx, '-inf', now, 'LIMIT', 0, 1000)
  for _, m in ipairs(due) do
    local ttl = redis.call('PTTL', m)
    if ttl == -2 then
      redis.call('ZREM', idx, m)
    elseif ttl == -1 then
      redis.call('ZADD', idx, 9000000000000000, m)
    else
      redis.call('ZADD', idx, now + ttl, m)
    end
  end
  if #due > 0 then fix_ttl(idx, 1000) end
end
local page = redis.call('ZSCAN', idx, ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local flat, keys = page[2], {}
for i = 1, #flat, 2 do keys[#keys + 1] = flat[i] end
local outk, outv, gone = {}, {}, {}
for i = 1, #keys, 1000 do
  local part = {unpack(keys, i, math.min(i + 999, #keys))}
  local values = redis.call('MGET', unpack(part))
  for j = 1, #part do
    if values[j] then
      outk[#outk + 1] = part[j]; outv[#outv + 1] = values[j]
    else
      gone[#gone + 1] = part[j]
    end
  end
end
for i = 1, #gone, 1000 do
  redis.call('ZREM', idx, unpack(gone, i, math.min(i + 999, #gone)))
end
return {page[1], outk, outv}
"""

#: Drop members that are no entry (checked here, atomically): their key is missing,
#: or GET says WRONGTYPE (another type, left as it is; GET, not TYPE, which the
#: documented ACL does not grant; any other error keeps the member).  KEYS =
#: index; ARGV = members.  Returns how many were dropped.
PRUNE_MISSING = _HELPERS + """\
local function no_entry(m)
  if redis.call('EXISTS', m) == 0 then return true end
  local v = redis.pcall('GET', m)
  return type(v) == 'table' and string.sub(tostring(v.err), 1, 9) == 'WRONGTYPE'
end
local n = 0
for _, m in ipairs(ARGV) do
  if no_entry(m) then
    n = n + redis.call('ZREM', KEYS[1], m)
  end
end
if n > 0 then fix_ttl(KEYS[1], 1000) end
return n
"""

#: Cluster write, step one (sent with the entry's write, see RedisStore.set).  KEYS = index; ARGV =
#: grace ms, then pairs of member and PX ms ("" for no deadline).  On a cluster
#: the score is the member's **last add time** (the index node's clock, strictly
#: rising per member), not its deadline: a member may only be dropped once its
#: entry is missing *and* nobody added it for longer than the grace (a writer
#: between its two steps re-adds first).  The index lives as long as the longest
#: TTL added plus the grace, and without expiry once an entry without one is added.
INDEX_ADD = _HELPERS + """\
local idx, grace = KEYS[1], tonumber(ARGV[1])
local existed = redis.call('EXISTS', idx) == 1
local now, persist, longest = now_ms(), false, 0
for i = 2, #ARGV, 2 do
  local old = redis.call('ZSCORE', idx, ARGV[i])
  local score = now
  if old and tonumber(old) >= now then score = tonumber(old) + 1 end
  redis.call('ZADD', idx, score, ARGV[i])
  if ARGV[i + 1] == '' then
    persist = true
  elseif tonumber(ARGV[i + 1]) > longest then
    longest = tonumber(ARGV[i + 1])
  end
end
local ttl = redis.call('PTTL', idx)
if persist then
  if ttl ~= -1 then redis.call('PERSIST', idx) end
elseif (ttl == -1 and not existed) or (ttl >= 0 and ttl < longest + grace) then
  redis.call('PEXPIRE', idx, longest + grace)
end
return 1
"""

#: Cluster: drop members not added for longer than the grace.  KEYS = index;
#: ARGV = grace ms, then pairs of member and the score the caller saw ("": any).
#: A member re-added since (its score changed) or recently is kept.  Callers
#: only pass members whose entry they found missing, or just deleted.
INDEX_PRUNE = _HELPERS + """\
local idx = KEYS[1]
local limit, n = now_ms() - tonumber(ARGV[1]), 0
for i = 2, #ARGV, 2 do
  local s = redis.call('ZSCORE', idx, ARGV[i])
  if s and tonumber(s) < limit and (ARGV[i + 1] == '' or tonumber(s) == tonumber(ARGV[i + 1])) then
    n = n + redis.call('ZREM', idx, ARGV[i])
  end
end
return n
"""

#: Cluster, the prune pass's last step: the index's expiry from its live entries.
#: KEYS = index; ARGV = grace ms, the highest score (last add) the pass saw, and
#: the longest remaining life in ms of the entries it found live ("-1": one has
#: no expiry, "": none).  Only when that score is still the highest and older
#: than the grace -- no writer added since the pass looked, none can be between
#: its two steps -- is the expiry set: ``PEXPIREAT`` now + longest + grace, or
#: ``PERSIST``.  Returns 1 if it was set.
INDEX_EXPIRE = _HELPERS + """\
local idx, grace = KEYS[1], tonumber(ARGV[1])
local top = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
if #top == 0 or ARGV[3] == '' then return 0 end
local now = now_ms()
if tonumber(top[2]) ~= tonumber(ARGV[2]) or tonumber(top[2]) >= now - grace then return 0 end
if ARGV[3] == '-1' then
  redis.call('PERSIST', idx)
else
  redis.call('PEXPIREAT', idx, now + tonumber(ARGV[3]) + grace)
end
return 1
"""

#: Bring existing entries into their indexes (standalone, Vercel KV).  KEYS =
#: entries; ARGV = their index keys, in the same order.  Entries that are gone
#: are skipped.  Returns how many were indexed.
REINDEX = _HELPERS + """\
local now, touched, n = now_ms(), {}, 0
for i = 1, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl ~= -2 then
    local score = 9000000000000000
    if ttl >= 0 then score = now + ttl end
    redis.call('ZADD', ARGV[i], score, KEYS[i])
    touched[ARGV[i]] = true
    n = n + 1
  end
end
for idx in pairs(touched) do fix_ttl(idx, 1000) end
return n
"""
