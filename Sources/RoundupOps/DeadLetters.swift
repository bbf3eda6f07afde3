import Foundation
import RoundupCore
import RoundupRedis

/// One dead letter: the original event's fields and why it failed.
public struct DeadLetter: Sendable, Equatable {
    public var id: String
    public var fields: [String: [UInt8]]

    public func string(_ name: String) -> String? { fields[name].map { String(decoding: $0, as: UTF8.self) } }

    public var summary: JSONValue {
        .object([
            "id": .string(id), "original_id": string("original_id").json, "account": string("account").json,
            "action": string("action").json, "type": string("type").json, "error": string("error").json,
            "deliveries": string("deliveries").json, "failed_at": string("failed_at").json,
        ])
    }
}

extension Optional where Wrapped == String {
    var json: JSONValue { map(JSONValue.string) ?? .null }
}

/// The dead-letter stream: list, show, replay into the webhook stream, purge.
public struct DeadLetterQueue: Sendable {
    let redis: RedisClient
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// The fields an event carries on the webhook stream (what the ingress wrote); the rest is dead-letter bookkeeping.
    static let eventFields = ["account", "action", "type", "model", "received", "body"]

    public func list(limit: Int) async throws -> [DeadLetter] {
        let reply = try await redis.send(RedisCommand("XRANGE", [RedisArgument(keys.deadLetterStream), "-", "+", "COUNT", RedisArgument(limit)]))
        return Self.parse(reply)
    }

    public func show(id: String) async throws -> DeadLetter? {
        let reply = try await redis.send(RedisCommand("XRANGE", [RedisArgument(keys.deadLetterStream), RedisArgument(id), RedisArgument(id)]))
        return Self.parse(reply).first
    }

    public func count() async throws -> Int {
        try await redis.send(RedisCommand("XLEN", [RedisArgument(keys.deadLetterStream)])).int ?? 0
    }

    /// Puts dead letters back on the webhook stream, each in one atomic step (XADD then XDEL), and returns how many.
    /// `ids` nil means all of them. `progress` is told after each batch.
    public func replay(ids: [String]?, progress: (Int) -> Void = { _ in }) async throws -> Int {
        var done = 0
        if let ids {
            for id in ids where try await replayOne(id: id) { done += 1 }
            progress(done)
            return done
        }
        while true {
            let batch = try await list(limit: 100)
            if batch.isEmpty { break }
            for letter in batch where try await replayOne(id: letter.id) { done += 1 }
            progress(done)
        }
        return done
    }

    private func replayOne(id: String) async throws -> Bool {
        let reply = try await redis.evaluate(
            Self.replayScript, keys: [RedisArgument(keys.deadLetterStream), RedisArgument(keys.webhookStream)],
            arguments: [RedisArgument(id)] + Self.eventFields.map { RedisArgument($0) })
        return reply.int == 1
    }

    static let replayScript = RedisScript(
        name: "dlq-replay",
        source: """
            -- KEYS[1]: dead-letter stream, KEYS[2]: webhook stream; ARGV[1]: entry id, ARGV[2..]: the event's field names
            local entry = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
            if not entry[1] then return 0 end
            local flat = entry[1][2]
            local have = {}
            for i = 1, #flat, 2 do have[flat[i]] = flat[i + 1] end
            local fields = {}
            for i = 2, #ARGV do
              if have[ARGV[i]] then table.insert(fields, ARGV[i]); table.insert(fields, have[ARGV[i]]) end
            end
            if #fields == 0 then return 0 end
            redis.call('XADD', KEYS[2], '*', unpack(fields))
            redis.call('XDEL', KEYS[1], ARGV[1])
            return 1
            """)

    /// Deletes every dead letter; returns how many there were.
    public func purge() async throws -> Int {
        let count = try await count()
        _ = try await redis.send(RedisCommand("DEL", [RedisArgument(keys.deadLetterStream)]))
        return count
    }

    static func parse(_ reply: RedisValue) -> [DeadLetter] {
        reply.streamEntries.map { DeadLetter(id: $0.id, fields: $0.fields) }
    }
}
