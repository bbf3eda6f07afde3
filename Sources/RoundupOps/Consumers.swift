public import RoundupRedis
public import RoundupStreams

/// Consumer names left in a group by processes that are gone (every restart of a worker without `ROUNDUP_WORKER_NAME`,
/// every pod of a rollout): `roundupctl consumers prune` removes them.
public enum ConsumerPruner {
    public struct Pruned: Sendable, Equatable {
        public var stream: RoundupStream
        public var consumer: String
        public var idleMilliseconds: Int
    }

    /// Removes the consumers of `stream`'s group idle at least `idleAtLeast` ms that hold no pending entry, and returns
    /// them (with `dryRun`, only says which). A consumer's pending entries would be lost with it (they leave the
    /// pending list, so nothing would ever reclaim them): the check and the removal are one script, so an entry
    /// delivered to it meanwhile keeps it.
    public static func prune(
        _ stream: RoundupStream, redis: RedisClient, keys: RedisKeys, idleAtLeast: Int, dryRun: Bool = false
    ) async throws -> [Pruned] {
        let report = try await QueueInspector.report(stream, redis: redis, keys: keys)
        var pruned: [Pruned] = []
        for consumer in report.consumers where consumer.idleMilliseconds >= idleAtLeast && consumer.pending == 0 {
            if !dryRun {
                // From every part's group (each webhook shard has its own); kept where an entry reached it meanwhile.
                var kept = false
                for part in stream.parts(keys) {
                    let reply = try await redis.evaluate(
                        script, keys: [RedisArgument(part.stream)],
                        arguments: [RedisArgument(stream.group(keys)), RedisArgument(consumer.name), RedisArgument(idleAtLeast)])
                    if reply.int == 0 { kept = true }
                }
                guard !kept else { continue }
            }
            pruned.append(Pruned(stream: stream, consumer: consumer.name, idleMilliseconds: consumer.idleMilliseconds))
        }
        return pruned
    }

    static let script = RedisScript(
        name: "consumer-prune",
        source: """
            -- KEYS[1]: stream; ARGV[1]: group, ARGV[2]: consumer, ARGV[3]: least idle time (ms). 1 when removed, 2 when
            -- the group has no such consumer (or the stream no such group), 0 when it is kept.
            if redis.call('EXISTS', KEYS[1]) == 0 then return 2 end
            local found = false
            for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
              for i = 1, #info, 2 do
                if info[i] == 'name' and info[i + 1] == ARGV[1] then found = true end
              end
            end
            if not found then return 2 end
            if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
            for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
              local name, idle
              for i = 1, #info, 2 do
                if info[i] == 'name' then name = info[i + 1] elseif info[i] == 'idle' then idle = info[i + 1] end
              end
              if name == ARGV[2] then
                if idle < tonumber(ARGV[3]) then return 0 end
                redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
                return 1
              end
            end
            return 2
            """)
}
