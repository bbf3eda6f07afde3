import RoundupRedis

/// Dedupe and enqueue in one all-or-nothing step. The `#!lua` line declares a script that writes, so a Redis at its
/// `maxmemory` refuses the whole script before it runs (no `allow-oom` flag): a delivery answered 503 leaves no
/// trace. Inside, the event is appended before the action is marked seen, so an error between the two can only make
/// a retry enqueue the event again (processing is idempotent), never answer "duplicate" for an event that was not
/// stored. A redelivery renews its mark: that write is this connection's latest, so the `WAIT` after the script covers
/// it, and with it (a replica applies writes in order) the original event, whoever wrote it.
///
/// Fairness: the shard's load hash (`StreamLoad`, lowered by the workers as entries leave) holds each account's events
/// and bytes waiting and its rate bucket; an account past its share is refused while its neighbours are not. When the
/// stream is empty the hash starts again, so counts an entry's odd exit left behind heal on the next drain.
enum IngressScripts {
    /// What the script answers besides an entry id.
    enum Refusal: Int {
        case duplicate = 0
        /// The shard is at its bound (events or bytes).
        case shardFull = -1
        /// The account holds its share of the shard (events or bytes).
        case accountFull = -2
        /// The account adds events faster than its rate.
        case accountRate = -3
    }

    /// `ARGV` before the entry's fields; the fields follow in `WebhookEvent`'s order (account first, body last but the
    /// optional `confirm`), so the script finds the account at `ARGV[9]`, the time at `ARGV[17]` and the body at
    /// `ARGV[19]`.
    static let fieldsStart = 8

    static let enqueue = RedisScript(
        name: "ingress-enqueue",
        source: """
            #!lua
            -- KEYS[1]: seen-action key, KEYS[2]: webhook stream, KEYS[3]: the shard's load
            -- ARGV[1]: TTL seconds, ARGV[2]: the shard's events (0: no bound), ARGV[3]: an account's events,
            -- ARGV[4]: an account's bytes, ARGV[5]: the shard's bytes, ARGV[6]: an account's events a second (0: none),
            -- ARGV[7]: reserved, ARGV[8..]: field, value, ... (ARGV[9] account, ARGV[17] received ms, ARGV[19] body)
            if redis.call('EXPIRE', KEYS[1], ARGV[1]) == 1 then
              return 0
            end
            local length = redis.call('XLEN', KEYS[2])
            local bound = tonumber(ARGV[2])
            if bound > 0 and length >= bound then
              return -1
            end
            if length == 0 then redis.call('DEL', KEYS[3]) end
            local account, now, size = ARGV[9], tonumber(ARGV[17]), string.len(ARGV[19])
            local load = redis.call('HMGET', KEYS[3], 'n:' .. account, 'b:' .. account, 'bytes', 'r:' .. account)
            local share, accountBytes, shardBytes = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
            if share > 0 and (tonumber(load[1]) or 0) >= share then return -2 end
            if accountBytes > 0 and (tonumber(load[2]) or 0) + size > accountBytes then return -2 end
            if shardBytes > 0 and (tonumber(load[3]) or 0) + size > shardBytes then return -1 end
            local rate, bucket = tonumber(ARGV[6]), nil
            if rate > 0 then
              -- A token bucket: `tokens:at`, refilled at `rate` a second up to the account's share (or 10 s of its rate).
              local capacity = share > 0 and share or rate * 10
              local tokens, at = capacity, now
              if load[4] then
                local sep = string.find(load[4], ':', 1, true)
                tokens, at = tonumber(string.sub(load[4], 1, sep - 1)), tonumber(string.sub(load[4], sep + 1))
                if now > at then tokens = math.min(capacity, tokens + (now - at) * rate / 1000) else now = at end
              end
              if tokens < 1 then return -3 end
              bucket = string.format('%.3f', tokens - 1) .. ':' .. now
            end
            local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 8))
            redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
            redis.call('HINCRBY', KEYS[3], 'n:' .. account, 1)
            redis.call('HINCRBY', KEYS[3], 'b:' .. account, size)
            redis.call('HINCRBY', KEYS[3], 'bytes', size)
            if bucket then redis.call('HSET', KEYS[3], 'r:' .. account, bucket) end
            return id
            """)
}
