import Foundation
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime

/// One dead letter of the webhook stream: the original event and why it failed.
public struct DeadLetter: Sendable, Equatable {
    public var letter: StreamDeadLetter
    /// The event as the ingress enqueued it; nil when its fields do not make one (no account or body).
    public var event: WebhookEvent?

    public init(_ letter: StreamDeadLetter) {
        self.letter = letter
        event = WebhookEvent(fields: letter.original)
    }

    public var id: String { letter.id }

    // The event's fields are read one by one as text: a dead letter may hold too little to make an event.
    public var account: String? { event?.account ?? letter.original.text(WebhookEvent.Field.account) }
    public var type: String? { event?.type ?? letter.original.text(WebhookEvent.Field.type) }
    /// The event's body as text.
    public var body: String? { letter.original.text(WebhookEvent.Field.body) }

    public var summary: JSONValue {
        .object([
            "id": .string(id), "original_id": letter.originalID.json, "account": account.json,
            "action": (event?.actionID ?? letter.original.text(WebhookEvent.Field.action)).json, "type": type.json, "error": letter.error.json,
            "deliveries": letter.deliveries.map(String.init).json, "failed_at": letter.failedAt.map(String.init).json,
        ])
    }
}

extension Optional where Wrapped == String {
    var json: JSONValue { map(JSONValue.string) ?? .null }
}

/// A stream's dead letters (the webhook stream's unless told): list, show, replay into the stream, purge.
public struct DeadLetterQueue: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    public let stream: RoundupStream
    /// Where its dead letters are.
    let deadLetters: String

    public init(redis: RedisClient, keys: RedisKeys, stream: RoundupStream = .webhooks) {
        self.redis = redis
        self.keys = keys
        self.stream = stream
        deadLetters = stream.deadLetters(keys)
    }

    /// Which dead letters a page shows: all of those given must match.
    public struct Filter: Sendable, Equatable {
        public var account: String?
        public var type: String?
        /// Text the error contains, in any case.
        public var error: String?

        public init(account: String? = nil, type: String? = nil, error: String? = nil) {
            self.account = account
            self.type = type
            self.error = error
        }

        public func matches(_ letter: DeadLetter) -> Bool {
            if let account, letter.account != account { return false }
            if let type, letter.type != type { return false }
            if let error, !(letter.letter.error ?? "").localizedCaseInsensitiveContains(error) { return false }
            return true
        }
    }

    /// Up to `limit` dead letters matching `filter`, oldest first, after `after` (exclusive; nil: from the oldest).
    /// Returns them and the id to continue after, nil when no more can follow.
    public func page(after: String? = nil, limit: Int, filter: Filter = Filter()) async throws -> (letters: [DeadLetter], next: String?) {
        var letters: [DeadLetter] = []
        var cursor = after
        while letters.count < limit {
            let reply = try await redis.send(
                RedisCommand(
                    "XRANGE", [RedisArgument(deadLetters), RedisArgument(cursor.map { "(" + $0 } ?? "-"), "+", "COUNT", RedisArgument(200)])
            )
            let batch = Self.parse(reply)
            for letter in batch {
                cursor = letter.id
                guard filter.matches(letter) else { continue }
                letters.append(letter)
                if letters.count == limit { break }
            }
            if batch.count < 200 {
                if letters.count < limit { cursor = nil }
                break
            }
        }
        return (letters, letters.count == limit ? cursor : nil)
    }

    /// Deletes these dead letters for good; returns how many existed.
    public func delete(ids: [String]) async throws -> Int {
        guard !ids.isEmpty else { return 0 }
        return try await redis.send(RedisCommand("XDEL", [RedisArgument(deadLetters)] + ids.map { RedisArgument($0) })).int ?? 0
    }

    public func show(id: String) async throws -> DeadLetter? {
        let reply = try await redis.send(RedisCommand("XRANGE", [RedisArgument(deadLetters), RedisArgument(id), RedisArgument(id)]))
        return Self.parse(reply).first
    }

    public func count() async throws -> Int {
        try await redis.send(RedisCommand("XLEN", [RedisArgument(deadLetters)])).int ?? 0
    }

    /// Puts dead letters back on their stream, each in one atomic step (XADD then XDEL), and returns how many.
    /// `ids` nil means all of those there are when it begins: an entry replayed and dead-lettered again meanwhile (one
    /// that still does not decode) is left for the next replay, not replayed in a loop. `progress` is told after each
    /// batch.
    public func replay(ids: [String]?, progress: (Int) -> Void = { _ in }) async throws -> Int {
        var done = 0
        if let ids {
            for id in ids where try await replayOne(id: id) { done += 1 }
            progress(done)
            return done
        }
        let newest = try await redis.send(RedisCommand("XREVRANGE", [RedisArgument(deadLetters), "+", "-", "COUNT", "1"])).streamEntries
        guard let last = newest.first?.id else { return 0 }
        var cursor = "-"
        while true {
            let reply = try await redis.send(
                RedisCommand("XRANGE", [RedisArgument(deadLetters), RedisArgument(cursor), RedisArgument(last), "COUNT", RedisArgument(100)]))
            let batch = Self.parse(reply)
            if batch.isEmpty { break }
            for letter in batch where try await replayOne(id: letter.id) { done += 1 }
            progress(done)
            cursor = "(" + batch[batch.count - 1].id
        }
        return done
    }

    private func replayOne(id: String) async throws -> Bool {
        let reply = try await redis.evaluate(
            Self.replayScript, keys: [RedisArgument(deadLetters), RedisArgument(stream.key(keys))],
            arguments: [RedisArgument(id)] + stream.messageFields.map { RedisArgument($0) })
        return reply.int == 1
    }

    static let replayScript = RedisScript(
        name: "dlq-replay",
        source: """
            -- KEYS[1]: dead-letter stream, KEYS[2]: its stream; ARGV[1]: entry id, ARGV[2..]: the message's field names
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
        _ = try await redis.send(RedisCommand("DEL", [RedisArgument(deadLetters)]))
        return count
    }

    static func parse(_ reply: RedisValue) -> [DeadLetter] {
        reply.streamEntries.map { DeadLetter(StreamDeadLetter(id: $0.id, fields: $0.fields)) }
    }
}
