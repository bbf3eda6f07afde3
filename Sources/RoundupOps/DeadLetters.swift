public import Foundation
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams

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
            "attempts": .array(letter.attempts.map(\.json)),
        ])
    }
}

extension StreamAttempt {
    /// As the tools show it: when (ISO 8601), by whom, the error (`class: message`).
    public var json: JSONValue {
        .object([
            "at": .string(Timestamp.string(Date(timeIntervalSince1970: Double(at) / 1000))), "consumer": .string(consumer),
            "error": .string(error.replacingOccurrences(of: "\t", with: ": ")),
        ])
    }
}

extension Optional where Wrapped == String {
    var json: JSONValue { map(JSONValue.string) ?? .null }
}

/// A stream's dead letters (the webhook stream's unless told): list, show, replay into the stream, purge. The webhook
/// stream's are kept per shard, each beside its shard's stream; they are listed shard after shard and named
/// `<shard>:<id>`.
public struct DeadLetterQueue: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    public let stream: RoundupStream
    /// Where its dead letters are.
    let parts: [StreamPart]

    public init(redis: RedisClient, keys: RedisKeys, stream: RoundupStream = .webhooks) {
        self.redis = redis
        self.keys = keys
        self.stream = stream
        parts = stream.parts(keys)
    }

    /// The part holding dead letter `id` (as the tools name it) and its id there.
    private func locate(_ id: String) throws -> (part: StreamPart, id: String) {
        guard let found = stream.part(holding: id, keys: keys) else {
            throw RedisClientError(.unexpectedReply, "\(id) is no dead letter id of the \(stream.rawValue) stream")
        }
        return found
    }

    /// Which dead letters a page shows, or a replay puts back: all of those given must match.
    public struct Filter: Sendable, Equatable {
        public var account: String?
        public var type: String?
        /// Text the error contains, in any case.
        public var error: String?
        /// Failed at or after this time (milliseconds since 1970); a letter that does not say when never matches.
        public var since: Int?
        /// Failed before this time (milliseconds since 1970).
        public var until: Int?

        public init(account: String? = nil, type: String? = nil, error: String? = nil, since: Int? = nil, until: Int? = nil) {
            self.account = account
            self.type = type
            self.error = error
            self.since = since
            self.until = until
        }

        /// No condition: every dead letter.
        public var isEmpty: Bool { self == Filter() }

        /// Milliseconds since 1970 of an ISO 8601 time, or of an age before `now` (`90s`, `30m`, `2h`, `1d`); nil when
        /// the text is neither.
        public static func moment(_ text: String, now: Date = Date()) -> Int? {
            if let date = Timestamp.date(text) { return Int(date.timeIntervalSince1970 * 1000) }
            let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
            guard let unit = text.last.flatMap({ units[$0] }), let amount = Double(text.dropLast()), amount >= 0, amount < 1e7 else { return nil }
            return Int((now.timeIntervalSince1970 - amount * unit) * 1000)
        }

        /// What to say of a time `moment` cannot read.
        public static func unreadable(_ name: String, _ text: String) -> String {
            "\(name) \(text): use an ISO 8601 time (2026-12-07T02:00:00Z) or an age (90s, 30m, 2h, 1d)"
        }

        public func matches(_ letter: DeadLetter) -> Bool {
            if let account, letter.account != account { return false }
            if let type, letter.type != type { return false }
            if let error, !(letter.letter.error ?? "").localizedCaseInsensitiveContains(error) { return false }
            if since != nil || until != nil {
                guard let failedAt = letter.letter.failedAt else { return false }
                if let since, failedAt < since { return false }
                if let until, failedAt >= until { return false }
            }
            return true
        }
    }

    /// What a replay by filter found: how many matched, by action type and by error class, and the first ids (of a
    /// dry run, what would be put back; of a replay, what was).
    public struct Selection: Sendable, Equatable {
        public var matched = 0
        public var replayed = 0
        public var byType: [String: Int] = [:]
        public var byError: [String: Int] = [:]
        public var ids: [String] = []
        /// The most ids a selection lists (the counts cover every match).
        public static let listed = 100

        public func json(dryRun: Bool) -> JSONValue {
            .object([
                "dry_run": .bool(dryRun), "matched": .number(Double(matched)), "replayed": .number(Double(replayed)),
                "by_type": .object(byType.mapValues { .number(Double($0)) }), "by_error": .object(byError.mapValues { .number(Double($0)) }),
                "ids": .array(ids.map(JSONValue.string)), "ids_truncated": .bool(matched > ids.count),
            ])
        }
    }

    /// Puts back the dead letters that match `filter` (every one there is when it begins, shard after shard; one
    /// dead-lettered again meanwhile waits for the next replay), or with `dryRun` only counts them: the same walk,
    /// nothing written.
    public func replay(matching filter: Filter, dryRun: Bool, progress: (Int) -> Void = { _ in }) async throws -> Selection {
        var selection = Selection()
        for part in parts {
            let newest = try await redis.send(RedisCommand("XREVRANGE", [RedisArgument(part.deadLetters), "+", "-", "COUNT", "1"])).streamEntries
            guard let last = newest.first?.id else { continue }
            var cursor = "-"
            while true {
                let reply = try await redis.send(
                    RedisCommand(
                        "XRANGE", [RedisArgument(part.deadLetters), RedisArgument(cursor), RedisArgument(last), "COUNT", RedisArgument(100)]))
                let batch = parse(reply, in: part)
                guard let end = batch.last?.id else { break }
                for (letter, local) in batch where filter.matches(letter) {
                    if !dryRun {
                        guard try await replayOne(id: local, in: part) else { continue }
                        selection.replayed += 1
                    }
                    selection.matched += 1
                    selection.byType[letter.type ?? "?", default: 0] += 1
                    let errorClass = letter.letter.error.map { String($0.prefix { $0 != "\t" && $0 != ":" }) } ?? "?"
                    selection.byError[errorClass.isEmpty ? "?" : errorClass, default: 0] += 1
                    if selection.ids.count < Selection.listed { selection.ids.append(letter.id) }
                }
                progress(selection.matched)
                cursor = "(" + end
            }
        }
        return selection
    }

    /// Up to `limit` dead letters matching `filter`, oldest first (shard after shard), after `after` (exclusive; nil:
    /// from the oldest). Returns them and the id to continue after, nil when no more can follow.
    public func page(after: String? = nil, limit: Int, filter: Filter = Filter()) async throws -> (letters: [DeadLetter], next: String?) {
        var letters: [DeadLetter] = []
        var firstPart = 0
        var cursor: String?
        if let after {
            let (part, id) = try locate(after)
            firstPart = parts.firstIndex(of: part) ?? 0
            cursor = id
        }
        var last: String?
        partLoop: for index in firstPart..<parts.count {
            let part = parts[index]
            while letters.count < limit {
                let reply = try await redis.send(
                    RedisCommand(
                        "XRANGE", [RedisArgument(part.deadLetters), RedisArgument(cursor.map { "(" + $0 } ?? "-"), "+", "COUNT", RedisArgument(200)])
                )
                let batch = parse(reply, in: part)
                for (letter, id) in batch {
                    cursor = id
                    last = letter.id
                    guard filter.matches(letter) else { continue }
                    letters.append(letter)
                    if letters.count == limit { break partLoop }
                }
                if batch.count < 200 { break }
            }
            cursor = nil
        }
        return (letters, letters.count == limit ? last : nil)
    }

    /// Deletes these dead letters for good; returns how many existed.
    public func delete(ids: [String]) async throws -> Int {
        var deleted = 0
        for id in ids {
            let (part, local) = try locate(id)
            deleted += try await redis.send(RedisCommand("XDEL", [RedisArgument(part.deadLetters), RedisArgument(local)])).int ?? 0
        }
        return deleted
    }

    public func show(id: String) async throws -> DeadLetter? {
        let (part, local) = try locate(id)
        let reply = try await redis.send(RedisCommand("XRANGE", [RedisArgument(part.deadLetters), RedisArgument(local), RedisArgument(local)]))
        return parse(reply, in: part).first?.letter
    }

    public func count() async throws -> Int {
        try await redis.deadLetterCount(of: stream, keys: keys)
    }

    /// Puts dead letters back on their stream (the shard they came from), each in one atomic step (XADD then XDEL), and
    /// returns how many. `ids` nil means all of those there are when it begins: an entry replayed and dead-lettered
    /// again meanwhile (one that still does not decode) is left for the next replay, not replayed in a loop.
    /// `progress` is told after each batch.
    public func replay(ids: [String]?, progress: (Int) -> Void = { _ in }) async throws -> Int {
        var done = 0
        if let ids {
            for id in ids {
                let (part, local) = try locate(id)
                if try await replayOne(id: local, in: part) { done += 1 }
            }
            progress(done)
            return done
        }
        // All: the walk of a replay by filter, with a filter that matches every dead letter.
        return try await replay(matching: Filter(), dryRun: false, progress: progress).replayed
    }

    private func replayOne(id: String, in part: StreamPart) async throws -> Bool {
        let reply = try await redis.evaluate(
            Self.replayScript,
            keys: [RedisArgument(part.deadLetters), RedisArgument(part.stream)] + (part.shard.map { [RedisArgument(keys.webhookLoad($0))] } ?? []),
            arguments: [RedisArgument(id)] + stream.messageFields.map { RedisArgument($0) })
        return reply.int == 1
    }

    static let replayScript = RedisScript(
        name: "dlq-replay",
        source: """
            -- KEYS[1]: dead-letter stream, KEYS[2]: its stream; ARGV[1]: entry id, ARGV[2..]: the message's field names
            -- KEYS[3] (a webhook shard): its load, raised by the entry put back as the ingress raises it (`StreamLoad`)
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
            if KEYS[3] and have['account'] then
              local size = string.len(have['body'] or '')
              redis.call('HINCRBY', KEYS[3], 'n:' .. have['account'], 1)
              redis.call('HINCRBY', KEYS[3], 'b:' .. have['account'], size)
              redis.call('HINCRBY', KEYS[3], 'bytes', size)
            end
            return 1
            """)

    /// Deletes every dead letter; returns how many there were.
    public func purge() async throws -> Int {
        let count = try await count()
        for part in parts { _ = try await redis.send(RedisCommand("DEL", [RedisArgument(part.deadLetters)])) }
        return count
    }

    /// Dead letters as the tools name them, with their ids in `part`.
    func parse(_ reply: RedisValue, in part: StreamPart) -> [(letter: DeadLetter, id: String)] {
        reply.streamEntries.map { (DeadLetter(StreamDeadLetter(id: stream.name(of: $0.id, in: part), fields: $0.fields)), $0.id) }
    }
}
