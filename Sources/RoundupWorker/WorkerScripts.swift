import RoundupRedis

enum WorkerScripts {
    /// Moves an entry to the dead-letter stream with its last error, then acks and deletes it, and trims the dead
    /// letters to their retention bounds; returns how many old dead letters the trim removed. Under OOM the XADD, its
    /// first write, is refused and nothing changes: the entry stays pending.
    static let deadLetter = RedisScript(
        name: "worker-dead-letter",
        source: """
            -- KEYS[1]: stream, KEYS[2]: dead-letter stream, KEYS[3]: errors hash
            -- ARGV[1]: group, ARGV[2]: entry id, ARGV[3]: deliveries, ARGV[4]: error if none recorded, ARGV[5]: now (ms),
            -- ARGV[6]: dead letters kept at most, ARGV[7]: the oldest id kept (ms of the age bound)
            local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
            local err = redis.call('HGET', KEYS[3], ARGV[2]) or ARGV[4]
            local fields = {}
            if entry[1] then fields = entry[1][2] end
            table.insert(fields, 'original_id'); table.insert(fields, ARGV[2])
            table.insert(fields, 'error'); table.insert(fields, err)
            table.insert(fields, 'deliveries'); table.insert(fields, ARGV[3])
            table.insert(fields, 'failed_at'); table.insert(fields, ARGV[5])
            redis.call('XADD', KEYS[2], '*', unpack(fields))
            redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
            redis.call('XDEL', KEYS[1], ARGV[2])
            redis.call('HDEL', KEYS[3], ARGV[2])
            -- Retention, like Sidekiq's dead set: at most ARGV[6] letters, none older than ARGV[7] (a stream id).
            local trimmed = redis.call('XTRIM', KEYS[2], 'MAXLEN', ARGV[6])
            trimmed = trimmed + redis.call('XTRIM', KEYS[2], 'MINID', ARGV[7])
            return trimmed
            """)
}
