import Foundation
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// `roundupctl find` and the dashboard's search: where one webhook event is now, by Trello action id, card id or
/// account (all of those given must match). An event is in one of four places: waiting in its shard's stream (not yet
/// delivered to a worker), pending (delivered, not acknowledged: with whom, for how long, how often, its last error),
/// dead-lettered (with its error), or applied (the activity history's rows for it: what it changed, and when).
public enum EventFinder {
    public struct Query: Sendable, Equatable {
        public var actionID: String?
        public var cardID: String?
        public var account: String?

        public init(actionID: String? = nil, cardID: String? = nil, account: String? = nil) {
            self.actionID = actionID
            self.cardID = cardID
            self.account = account
        }

        public var isEmpty: Bool { actionID == nil && cardID == nil && account == nil }

        func matches(account: String?, actionID: String?, body: [UInt8]?) -> Bool {
            if let want = self.account, account != want { return false }
            if let want = self.actionID, actionID != want { return false }
            if let want = cardID {
                // The card an action is about (`action.data.card.id`): the body is parsed only when it holds the id.
                guard let body, body.firstRange(of: Array(want.utf8)) != nil,
                    (try? JSONParser.parse(body))?["action"]?["data"]?["card"]?["id"]?.stringValue == want
                else { return false }
            }
            return true
        }
    }

    public enum Place: String, Sendable {
        case waiting, pending
        case deadLetter = "dead_letter"
        case applied
    }

    /// One place an event (or what it did) was found.
    public struct Found: Sendable, Equatable {
        public var place: Place
        /// The entry's id as the tools name it (`<shard>:<id>`); nil for an applied event's history.
        public var id: String?
        public var account: String?
        public var actionID: String?
        public var type: String?
        public var cardID: String?
        /// When the ingress took it (ISO 8601), for an event still in a stream.
        public var receivedAt: String?
        public var consumer: String?
        public var idleMilliseconds: Int?
        public var deliveries: Int?
        public var error: String?
        /// A dead letter's, as milliseconds since 1970.
        public var failedAt: Int?
        /// A pending entry's or a dead letter's failed deliveries, oldest first (`StreamAttempt.kept` at most).
        public var attempts: [StreamAttempt] = []
        /// The trace the ingress started for it (tracing on): the id to look up in the tracing backend.
        public var traceID: String?
        /// An applied event's history row: what it changed.
        public var activity: ActivityRecord?

        public var json: JSONValue {
            var object: [String: JSONValue] = [
                "place": .string(place.rawValue), "id": id.json, "account": account.json, "action": actionID.json, "type": type.json,
                "card": cardID.json, "received_at": receivedAt.json, "consumer": consumer.json,
                "idle_ms": idleMilliseconds.map { .number(Double($0)) } ?? .null, "deliveries": deliveries.map { .number(Double($0)) } ?? .null,
                "error": error.json, "failed_at": failedAt.map { .string(Timestamp.string(Date(timeIntervalSince1970: Double($0) / 1000))) } ?? .null,
            ]
            if let traceID { object["trace_id"] = .string(traceID) }
            if !attempts.isEmpty {
                object["attempts"] = .array(attempts.map(\.json))
            }
            if let activity {
                object["change"] = .object([
                    "kind": .string(activity.kind.rawValue), "field": activity.field.json,
                    "side": activity.side.map { .string($0.rawValue) } ?? .null,
                    "sync_list_id": activity.syncListID.json, "reminder_id": activity.reminderID.json, "message": activity.message.json,
                    "at": .string(activity.createdAt),
                ])
            }
            return .object(object)
        }
    }

    /// Every place the events matching `query` are, at most `limit` of each kind, streams first. The applied history is
    /// read for the accounts named or found in the streams; with neither, for every account (`searchedAccounts` says
    /// how many were read).
    public static func find(
        _ query: Query, redis: RedisClient, keys: RedisKeys, store: any ServerStore, limit: Int = 50
    ) async throws -> (found: [Found], searchedAccounts: Int) {
        precondition(!query.isEmpty, "a query names something")
        var found: [Found] = []
        let stream = RoundupStream.webhooks
        for part in stream.parts(keys) {
            found += try await inStream(query, part: part, stream: stream, redis: redis, keys: keys, limit: limit - found.count)
            if found.count >= limit { break }
        }
        var letters: [Found] = []
        let queue = DeadLetterQueue(redis: redis, keys: keys)
        var after: String?
        repeat {
            let (page, next) = try await queue.page(after: after, limit: 500)
            for letter in page where query.matches(account: letter.account, actionID: letter.event?.actionID, body: letter.event?.body) {
                letters.append(
                    Found(
                        place: .deadLetter, id: letter.id, account: letter.account, actionID: letter.event?.actionID, type: letter.type,
                        cardID: cardID(letter.event?.body), deliveries: letter.letter.deliveries,
                        error: letter.letter.error?.replacingOccurrences(of: "\t", with: ": "), failedAt: letter.letter.failedAt,
                        attempts: letter.letter.attempts, traceID: letter.event?.trace.map { String($0.traceID) }))
            }
            after = next
        } while after != nil && letters.count < limit
        found += letters.prefix(limit)

        var accounts = Set(found.compactMap(\.account))
        if let account = query.account { accounts = [account] }
        if accounts.isEmpty { accounts = Set(try await store.allAccounts().map(\.details.id)) }
        var applied: [Found] = []
        for account in accounts.sorted() where applied.count < limit {
            let rows = try await store.activity(
                accountID: account, ActivityQuery(cardID: query.cardID, trelloActionID: query.actionID, limit: limit - applied.count))
            // Only what a webhook event did (a Trello action), newest first.
            for row in rows where row.trelloActionID != nil {
                applied.append(
                    Found(place: .applied, account: row.accountID, actionID: row.trelloActionID, cardID: row.cardID, activity: row))
            }
        }
        return (found + applied, accounts.count)
    }

    /// The events of one shard's stream that match, each waiting or pending (with whom).
    static func inStream(
        _ query: Query, part: StreamPart, stream: RoundupStream, redis: RedisClient, keys: RedisKeys, limit: Int
    ) async throws -> [Found] {
        var found: [(Found, String)] = []
        var cursor = "-"
        while found.count < limit {
            let entries = try await redis.send(
                RedisCommand("XRANGE", [RedisArgument(part.stream), RedisArgument(cursor), "+", "COUNT", RedisArgument(500)])
            ).streamEntries
            guard let last = entries.last?.id else { break }
            for entry in entries where found.count < limit {
                let event = WebhookEvent(fields: entry.fields)
                let account = event?.account ?? entry.fields.text(WebhookEvent.Field.account)
                guard query.matches(account: account, actionID: event?.actionID, body: event?.body) else { continue }
                found.append(
                    (
                        Found(
                            place: .waiting, id: stream.name(of: entry.id, in: part), account: account, actionID: event?.actionID, type: event?.type,
                            cardID: cardID(event?.body),
                            receivedAt: event?.receivedMilliseconds.map { Timestamp.string(Date(timeIntervalSince1970: Double($0) / 1000)) },
                            traceID: event?.trace.map { String($0.traceID) }),
                        entry.id
                    ))
            }
            if entries.count < 500 { break }
            cursor = "(" + last
        }
        guard !found.isEmpty else { return [] }
        // Delivered ones are pending: with whom, idle how long, delivered how often, and their last error.
        var commands = found.map { _, id in
            RedisCommand("XPENDING", [RedisArgument(part.stream), RedisArgument(stream.group(keys)), RedisArgument(id), RedisArgument(id), "1"])
        }
        // Each one's last error, then its attempts.
        if let errors = part.errors {
            commands.append(
                RedisCommand(
                    "HMGET", [RedisArgument(errors)] + found.map { RedisArgument($0.1) } + found.map { RedisArgument(StreamAttempt.field($0.1)) }))
        }
        let replies = await redis.pipelineEach(commands)
        let recorded: [RedisValue] = part.errors == nil ? [] : ((try? replies.last?.get())?.array ?? [])
        return found.enumerated().map { index, pair in
            var event = pair.0
            // No group yet (never consumed) or not pending: waiting.
            if case .success(let reply) = replies[index], let row = reply.array?.first?.array, row.count >= 4 {
                event.place = .pending
                event.consumer = row[1].string
                event.idleMilliseconds = row[2].int
                event.deliveries = row[3].int
                if index < recorded.count { event.error = recorded[index].string?.replacingOccurrences(of: "\t", with: ": ") }
                if found.count + index < recorded.count { event.attempts = recorded[found.count + index].string.map(StreamAttempt.decode) ?? [] }
            }
            return event
        }
    }

    static func cardID(_ body: [UInt8]?) -> String? {
        body.flatMap { try? JSONParser.parse($0) }?["action"]?["data"]?["card"]?["id"]?.stringValue
    }
}
