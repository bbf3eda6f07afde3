public import RoundupRedis

extension RedisClient {
    /// Entries in `stream` now, over all its parts (`XLEN` of each, one pipeline per primary).
    public func length(of stream: RoundupStream, keys: RedisKeys) async throws -> Int {
        try await total(stream.parts(keys).map { RedisCommand("XLEN", [RedisArgument($0.stream)]) })
    }

    /// Dead letters of `stream`, over all its parts.
    public func deadLetterCount(of stream: RoundupStream, keys: RedisKeys) async throws -> Int {
        try await total(stream.parts(keys).map { RedisCommand("XLEN", [RedisArgument($0.deadLetters)]) })
    }

    /// Entries of `stream` delivered to its group and not yet acknowledged, over all its parts.
    public func pendingCount(of stream: RoundupStream, keys: RedisKeys) async throws -> Int {
        var sum = 0
        for reply in try await pipeline(
            stream.parts(keys).map { RedisCommand("XPENDING", [RedisArgument($0.stream), RedisArgument(stream.group(keys))]) })
        {
            // A part never read has no group yet: nothing is pending there.
            if case .error(let message) = reply {
                if RedisErrorCode(reply: message) == .noGroup { continue }
                throw RedisClientError.reply(message, answering: "XPENDING")
            }
            sum += reply.array?.first?.int ?? 0
        }
        return sum
    }

    private func total(_ commands: [RedisCommand]) async throws -> Int {
        var sum = 0
        for reply in try await pipeline(commands) {
            if case .error(let message) = reply { throw RedisClientError.reply(message, answering: "XLEN") }
            sum += reply.int ?? 0
        }
        return sum
    }
}
