public import Logging
public import RoundupRedis

/// The keys of the versions before the layout for Redis Cluster's slots, moved at start-up on a standalone
/// Redis (a cluster never held them). The job and push streams, and their dead letters, are renamed, which keeps their
/// consumer groups and pending entries; if the new stream exists already (a job enqueued by a new API process first),
/// the old one's entries are appended to it instead, and a job or push that was pending is delivered once more (jobs
/// hold a lease, a push is sent at most twice). The webhook stream is drained by the workers first, before its
/// shards (`ShardedStreamDriver`); the routing tables are published again by every worker at start-up, and the old
/// ones removed here; other keys (dedupe marks, throttles, echo fingerprints) expire by themselves.
///
/// The API's request counts and token epochs left `{auth}` for their account's slot later (`RedisKeys.authEpoch`),
/// on a cluster too, and are not moved either: a count lives two minutes, and an epoch missing under its new name is
/// made from Redis's clock, a value no token was ever kept with, so a lost epoch makes processes ask the store again and
/// never re-validates a revoked token. The old names expire within the hour; until then a revocation advances the old
/// epoch where it exists, for API processes of before still running (`TokenCache.revoke` in RoundupAPI).
public enum LegacyKeys {
    public static func migrate(redis: RedisClient, keys: RedisKeys, logger: Logger) async throws {
        guard !redis.isCluster else { return }
        let p = keys.prefix
        let streams = [
            (p + "stream:jobs", keys.jobStream), (p + "stream:jobs:dead", keys.jobDeadLetters), (p + "stream:push", keys.pushStream),
            (p + "stream:push:dead", keys.pushDeadLetters),
        ]
        for (old, new) in streams where try await redis.send(RedisCommand("EXISTS", [RedisArgument(old)])).int == 1 {
            if try await redis.send(RedisCommand("RENAMENX", [RedisArgument(old), RedisArgument(new)])).int == 1 {
                logger.notice("redis key moved to its slot's name", metadata: ["from": "\(old)", "to": "\(new)"])
                continue
            }
            var moved = 0
            while true {
                let entries = try await redis.send(RedisCommand("XRANGE", [RedisArgument(old), "-", "+", "COUNT", "500"])).streamEntries
                if entries.isEmpty { break }
                var commands = entries.map { entry in
                    RedisCommand.streamAppend(new, fields: entry.fields.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) })
                }
                commands.append(RedisCommand("XDEL", [RedisArgument(old)] + entries.map { RedisArgument($0.id) }))
                for reply in try await redis.pipeline(commands) {
                    if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "moving \(old)") }
                }
                moved += entries.count
            }
            _ = try await redis.send(RedisCommand("DEL", [RedisArgument(old)]))
            logger.notice("redis stream entries moved to its slot's name", metadata: ["from": "\(old)", "to": "\(new)", "entries": "\(moved)"])
        }
        // The webhook stream's dead letters of before, each to its account's shard's (where `roundupctl dlq` sees them).
        let legacyDead = p + "stream:webhooks:dead"
        var movedLetters = 0
        while true {
            let entries = try await redis.send(RedisCommand("XRANGE", [RedisArgument(legacyDead), "-", "+", "COUNT", "500"])).streamEntries
            if entries.isEmpty { break }
            var commands = entries.map { entry in
                let account = entry.fields["account"].map { String(decoding: $0, as: UTF8.self) } ?? ""
                return RedisCommand.streamAppend(
                    keys.deadLetterStream(WebhookShard(account: account)),
                    fields: entry.fields.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) })
            }
            commands.append(RedisCommand("XDEL", [RedisArgument(legacyDead)] + entries.map { RedisArgument($0.id) }))
            for reply in try await redis.pipeline(commands) {
                if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "moving \(legacyDead)") }
            }
            movedLetters += entries.count
        }
        if movedLetters > 0 {
            _ = try await redis.send(RedisCommand("DEL", [RedisArgument(legacyDead)]))
            logger.notice("webhook dead letters moved to their shards", metadata: ["dead_letters": "\(movedLetters)"])
        }
        // The routing tables of before: every worker publishes them again under the new names as it starts.
        let removed = try await redis.send(
            RedisCommand("DEL", [RedisArgument(p + "webhook-secrets"), RedisArgument(p + "webhook-tokens"), RedisArgument(p + "routing:epoch")]))
        // Their route sets and version hashes, walked once: only when the tables of before were still there.
        guard (removed.int ?? 0) > 0 else { return }
        for pattern in [p + "route:*", p + "routing:versions:*"] {
            _ = try await redis.scan(matching: pattern, onNodeServing: p, maxPages: 100_000) { found in
                _ = try await redis.send(RedisCommand("UNLINK", found.map { RedisArgument($0) }))
            }
        }
        logger.notice("routing tables of before removed; published again under their slot's names")
    }
}
