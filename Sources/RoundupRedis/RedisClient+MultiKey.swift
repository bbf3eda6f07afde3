public import NIOCore

/// Commands over many keys that may live in different slots: in a cluster one command per slot, all in one pipeline (one
/// write per primary), so a caller never builds a `CROSSSLOT`; on a standalone Redis one command, as before.
extension RedisClient {
    /// `MGET` of `keys`, in their order.
    public func values(of keys: [String], timeout: TimeAmount? = nil) async throws -> [RedisValue] {
        guard !keys.isEmpty else { return [] }
        let groups = isCluster ? Self.bySlot(keys) : [Array(keys.indices)]
        let replies = try await pipeline(groups.map { RedisCommand("MGET", $0.map { RedisArgument(keys[$0]) }) }, timeout: timeout)
        var values = [RedisValue](repeating: .null, count: keys.count)
        for (indices, reply) in zip(groups, replies) {
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "MGET") }
            for (index, value) in zip(indices, reply.array ?? []) { values[index] = value }
        }
        return values
    }

    /// `DEL` of `keys`; how many existed.
    @discardableResult
    public func delete(_ keys: [String], timeout: TimeAmount? = nil) async throws -> Int {
        guard !keys.isEmpty else { return 0 }
        let groups = isCluster ? Self.bySlot(keys) : [Array(keys.indices)]
        let replies = try await pipeline(groups.map { RedisCommand("DEL", $0.map { RedisArgument(keys[$0]) }) }, timeout: timeout)
        var deleted = 0
        for reply in replies {
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "DEL") }
            deleted += reply.int ?? 0
        }
        return deleted
    }

    /// The positions of `keys` grouped by slot, each group in order, the groups in the order of their first key.
    static func bySlot(_ keys: [String]) -> [[Int]] {
        var groups: [RedisHashSlot: Int] = [:]
        var result: [[Int]] = []
        for (index, key) in keys.enumerated() {
            let slot = RedisHashSlot(key: key)
            if let at = groups[slot] {
                result[at].append(index)
            } else {
                groups[slot] = result.count
                result.append([index])
            }
        }
        return result
    }
}
