import RoundupRedis

/// Dedupe and enqueue in one all-or-nothing step. The `#!lua` line declares a script that writes, so a Redis at its
/// `maxmemory` refuses the whole script before it runs (no `allow-oom` flag): a delivery answered 503 leaves no
/// trace. Inside, the event is appended before the action is marked seen, so an error between the two can only make
/// a retry enqueue the event again (processing is idempotent), never answer "duplicate" for an event that was not
/// stored. Returns the stream entry id, 0 for a redelivery, or -1 when the backlog is at its bound. A redelivery renews
/// its mark: that write is this connection's latest, so the `WAIT` after the script covers it, and with it (a
/// replica applies writes in order) the original event, whoever wrote it.
enum IngressScripts {
    static let enqueue = RedisScript(
        name: "ingress-enqueue",
        source: """
            #!lua
            -- KEYS[1]: seen-action key, KEYS[2]: webhook stream
            -- ARGV[1]: TTL seconds, ARGV[2]: backlog bound (0: none), ARGV[3..]: field, value, ...
            if redis.call('EXPIRE', KEYS[1], ARGV[1]) == 1 then
              return 0
            end
            local bound = tonumber(ARGV[2])
            if bound > 0 and redis.call('XLEN', KEYS[2]) >= bound then
              return -1
            end
            local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
            redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
            return id
            """)
}
