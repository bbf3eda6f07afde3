import NIOCore
public import RoundupRedis

/// What every consumer of a stream with a consumer group needs (webhook, job and push streams).
extension RedisClient {
    /// Creates the consumer group from the stream's start (so nothing enqueued before is skipped); one that exists is fine.
    public func createGroupIfMissing(stream: String, group: String) async throws {
        // Read first: a Redis at its maxmemory refuses XGROUP CREATE (a command that may allocate) but answers XINFO,
        // and a consumer that could not start would never drain what fills Redis.
        if let groups = try? await send(RedisCommand("XINFO", ["GROUPS", RedisArgument(stream)])),
            groups.array?.contains(where: { $0.fieldMap["name"]?.string == group }) == true
        {
            return
        }
        do {
            _ = try await send(RedisCommand("XGROUP", ["CREATE", RedisArgument(stream), RedisArgument(group), "0", "MKSTREAM"]))
        } catch let error as RedisClientError where error.replyCode == .busyGroup {
            // Already there.
        }
    }

    /// Acks and deletes entries one group has finished (no other group reads these streams). Best effort: an entry
    /// left pending is reclaimed later, and handling it again is harmless.
    public func acknowledgeAndDelete(stream: String, group: String, ids: [String]) async {
        guard !ids.isEmpty else { return }
        let arguments = ids.map { RedisArgument($0) }
        _ = try? await pipeline([
            RedisCommand("XACK", [RedisArgument(stream), RedisArgument(group)] + arguments),
            RedisCommand("XDEL", [RedisArgument(stream)] + arguments),
        ])
    }
}
