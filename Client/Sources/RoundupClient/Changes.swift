import Foundation
import OpenAPIRuntime

/// One acknowledgement: the change, and for a create the reminder the app made for it.
public struct ChangeAck: Sendable, Hashable {
    public var id: Int
    public var reminderID: String?

    public init(id: Int, reminderID: String? = nil) {
        self.id = id
        self.reminderID = reminderID
    }
}

extension RoundupClient {
    /// One page of pending changes after `after`.
    public func changesPage(after: Int, limit: Int) async throws -> (changes: [Change], hasMore: Bool) {
        let page = try await changesPage(after: after, limit: limit, deviceID: nil)
        return (page.changes, page.hasMore)
    }

    /// One page of pending changes after `after`. With `deviceID` (one of the account's devices), only the changes no
    /// other device holds, which become this device's until `claimedUntil` (see `GET /dailyroundup/changes`).
    public func changesPage(after: Int, limit: Int, deviceID: String?) async throws -> (changes: [Change], hasMore: Bool, claimedUntil: Date?) {
        switch try await call({ try await api.listChanges(query: .init(deviceId: deviceID, afterId: after, limit: limit)) }) {
        case .ok(let ok):
            let page = try ok.body.json
            return (page.changes, page.hasMore, page.claimedUntil)
        case let other: throw Self.unexpected(other)
        }
    }

    /// Every pending change after `after`, in id order, paging with `after_id` until `has_more` is false. With
    /// `deviceID`, the ones no other device of the account holds, each becoming this device's (start from 0: a change
    /// another device let go keeps its lower id).
    public func changes(after: Int = 0, pageSize: Int = 200, deviceID: String? = nil) -> ChangePages {
        ChangePages(client: self, after: after, pageSize: pageSize, deviceID: deviceID)
    }

    /// Gives back the changes `deviceID` holds (all of them, or those of `ids`), so the account's other devices get them
    /// now rather than when the hold lapses; answers how many it held.
    @discardableResult
    public func releaseChanges(deviceID: String, ids: [Int]? = nil) async throws -> Int {
        switch try await call({ try await api.releaseChanges(body: .json(.init(deviceId: deviceID, ids: ids))) }) {
        case .ok(let ok): return try ok.body.json.released
        case let other: throw Self.unexpected(other)
        }
    }

    /// Acks one change (with the reminder made for it, for a create); answers the ids acked.
    @discardableResult
    public func ack(_ id: Int, reminderID: String? = nil) async throws -> [Int] {
        let body = Components.Schemas.AckBody(reminderId: reminderID)
        switch try await call({ try await api.ackChange(path: .init(id: id), body: .json(body)) }) {
        case .ok(let ok): return try ok.body.json.acked
        case let other: throw Self.unexpected(other)
        }
    }

    /// Acks many changes at once, all or nothing; answers the ids acked.
    @discardableResult
    public func ack(_ acks: [ChangeAck]) async throws -> [Int] {
        let body = Components.Schemas.BatchAckBody.case1(.init(acks: acks.map { .init(id: $0.id, reminderId: $0.reminderID) }))
        switch try await call({ try await api.ackChanges(body: .json(body)) }) {
        case .ok(let ok): return try ok.body.json.acked
        case let other: throw Self.unexpected(other)
        }
    }

    /// The pending changes as they come: every one after `after`, then each new one, from the server's change stream.
    /// When the stream ends or breaks (the server restarts, the network drops), it reconnects by itself with
    /// `reconnect`'s backoff and resumes after the last change it delivered, so nothing is missed or repeated. It ends
    /// when the task that iterates it is cancelled, or throws when the server refuses it for good (a bad token, an
    /// unknown device) or `reconnect`'s attempts in a row all fail.
    ///
    /// With `deviceID`, that device gets no background pushes while it holds the stream, and the stream delivers only
    /// the changes no other device holds, each becoming this device's; a change another device let go may come with a
    /// lower id than the one before it (the stream resumes after the highest id delivered).
    public func liveChanges(
        after: Int = 0, deviceID: String? = nil, reconnect: RetryPolicy = RetryPolicy(attempts: .max, base: .milliseconds(500), ceiling: .seconds(30))
    ) -> AsyncThrowingStream<Change, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var last = after
                var failures = 0
                while !Task.isCancelled {
                    do {
                        let output = try await call { try await api.streamChanges(query: .init(afterId: last, deviceId: deviceID)) }
                        guard case .ok(let ok) = output else { throw Self.unexpected(output) }
                        let events = try ok.body.textEventStream.asDecodedServerSentEventsWithJSONData(
                            of: Change.self, decoder: Self.eventDecoder)
                        for try await event in events {
                            guard let change = event.data else { continue }
                            // Without a device, a change at or before the position was delivered already (never
                            // expected; kept safe). With one, a lower id is a change another device let go.
                            guard deviceID != nil || change.id > last else { continue }
                            continuation.yield(change)
                            last = max(last, change.id)
                            failures = 0
                        }
                        // The server ended the stream (it is stopping): reconnect at once, then back off.
                        failures += 1
                    } catch {
                        if Task.isCancelled { break }
                        if let refused = error as? RoundupError, [400, 401, 403, 404, 422].contains(refused.status) {
                            continuation.finish(throwing: refused)
                            return
                        }
                        failures += 1
                        if failures >= reconnect.attempts {
                            continuation.finish(throwing: error)
                            return
                        }
                    }
                    if failures > 1 {
                        do { try await Task.sleep(for: reconnect.delay(retry: failures - 1)) } catch { break }
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Decodes an event's change as the server writes it (times in ISO 8601 with milliseconds).
    static var eventDecoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            if let date = try? Date(
                text, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
            {
                return date
            }
            if let date = try? Date(text, strategy: .iso8601) { return date }
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 time: \(text)"))
        }
        return decoder
    }
}

/// `RoundupClient.changes()`: pages of pending changes as one sequence.
public struct ChangePages: AsyncSequence, Sendable {
    public typealias Element = Change
    let client: RoundupClient
    let after: Int
    let pageSize: Int
    var deviceID: String? = nil

    public struct AsyncIterator: AsyncIteratorProtocol {
        let client: RoundupClient
        let pageSize: Int
        let deviceID: String?
        var last: Int
        var buffer: [Change] = []
        var done = false

        public mutating func next() async throws -> Change? {
            while buffer.isEmpty {
                if done { return nil }
                let page = try await client.changesPage(after: last, limit: pageSize, deviceID: deviceID)
                buffer = page.changes.reversed()
                done = !page.hasMore || page.changes.isEmpty
                if let newest = page.changes.last { last = newest.id }
            }
            return buffer.popLast()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(client: client, pageSize: pageSize, deviceID: deviceID, last: after) }

    /// Every change, in an array.
    public func collect() async throws -> [Change] {
        var all: [Change] = []
        for try await change in self { all.append(change) }
        return all
    }
}
