import Foundation
import NIOConcurrencyHelpers

/// A stream with one consumer group, in memory: what `MemoryStreamDriver` reads, for tests of consumer logic
/// without Redis (as swift-jobs' `MemoryQueue` does for its drivers). Shared by the drivers of several consumers.
public final class MemoryStream: Sendable {
    public struct Pending: Sendable, Equatable {
        public var consumer: String
        public var deliveries: Int
        public var lastDelivered: ContinuousClock.Instant
    }

    struct State {
        var entries: [(id: String, fields: [String: [UInt8]])] = []
        var nextID = 1
        /// Index in `entries` of the first entry never delivered to the group.
        var cursor = 0
        var pending: [String: Pending] = [:]
        var errors: [String: String] = [:]
        var attempts: [String: [StreamAttempt]] = [:]
        var deadLetters: [StreamDeadLetter] = []
        var appended: [StreamAppend] = []
        /// Failures to throw from the next calls, by operation name (`read`, `settle`, …).
        var failures: [String: Int] = [:]
        var calls: [(operation: String, at: ContinuousClock.Instant)] = []
    }

    let state = NIOLockedValueBox(State())

    public init() {}

    /// Appends an entry; returns its id.
    @discardableResult
    public func add(_ fields: [String: [UInt8]]) -> String {
        state.withLockedValue { state in
            let id = "\(state.nextID)-0"
            state.nextID += 1
            state.entries.append((id, fields))
            return id
        }
    }

    /// Ids still in the stream.
    public var ids: [String] { state.withLockedValue { $0.entries.map(\.id) } }
    public var pending: [String: Pending] { state.withLockedValue { $0.pending } }
    public var errors: [String: String] { state.withLockedValue { $0.errors } }
    /// Each entry's recorded attempts, oldest first.
    public var attempts: [String: [StreamAttempt]] { state.withLockedValue { $0.attempts } }
    public var deadLetters: [StreamDeadLetter] { state.withLockedValue { $0.deadLetters } }
    public var appended: [StreamAppend] { state.withLockedValue { $0.appended } }
    /// When each driver operation was called, in order.
    public var calls: [(operation: String, at: ContinuousClock.Instant)] { state.withLockedValue { $0.calls } }

    /// Makes the next `count` calls of `operation` (`prepare`, `read`, `pending`, `claim`, `extendLease`, `settle`,
    /// `deadLetter`) throw.
    public func fail(_ operation: String, times count: Int = 1) {
        state.withLockedValue { $0.failures[operation, default: 0] += count }
    }

    /// Makes an entry look idle for `idle` (as if its consumer stopped extending its lease that long ago).
    public func age(_ id: String, by idle: Duration) {
        state.withLockedValue { state in state.pending[id]?.lastDelivered = .now - idle }
    }

    fileprivate func call(_ operation: String) throws {
        try state.withLockedValue { state in
            state.calls.append((operation, .now))
            if let left = state.failures[operation], left > 0 {
                state.failures[operation] = left - 1
                throw MemoryStreamError(operation: operation)
            }
        }
    }
}

public struct MemoryStreamError: Error, Sendable, Equatable {
    public var operation: String
}

/// One consumer's `StreamDriver` on a `MemoryStream`.
public struct MemoryStreamDriver: StreamDriver {
    public let stream: MemoryStream
    public let consumer: String
    /// Dead letters kept at most.
    public var deadLetterMax: Int

    public init(stream: MemoryStream, consumer: String, deadLetterMax: Int = 10_000) {
        self.stream = stream
        self.consumer = consumer
        self.deadLetterMax = deadLetterMax
    }

    public func prepare() async throws { try stream.call("prepare") }

    public func reset() async { try? stream.call("reset") }

    public func read(count: Int, block: Duration?) async throws -> [StreamDelivery] {
        try stream.call("read")
        let deadline = ContinuousClock.now + (block ?? .zero)
        while true {
            let delivered = stream.state.withLockedValue { state -> [StreamDelivery] in
                let end = min(state.entries.count, state.cursor + count)
                let batch = state.entries[state.cursor..<end].map { StreamDelivery(id: $0.id, fields: $0.fields) }
                state.cursor = end
                for entry in batch { state.pending[entry.id] = MemoryStream.Pending(consumer: consumer, deliveries: 1, lastDelivered: .now) }
                return batch
            }
            if !delivered.isEmpty || ContinuousClock.now >= deadline { return delivered }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    public func pending(idle: Duration, count: Int) async throws -> [StreamPendingEntry] {
        try stream.call("pending")
        let now = ContinuousClock.now
        return stream.state.withLockedValue { state in
            state.entries.compactMap { entry in
                guard let pending = state.pending[entry.id], now - pending.lastDelivered >= idle else { return nil }
                return StreamPendingEntry(id: entry.id, deliveries: pending.deliveries)
            }.prefix(count).map { $0 }
        }
    }

    public func claim(_ ids: [String], idle: Duration) async throws -> [StreamDelivery] {
        try stream.call("claim")
        let now = ContinuousClock.now
        return stream.state.withLockedValue { state in
            ids.compactMap { id -> StreamDelivery? in
                guard var pending = state.pending[id], now - pending.lastDelivered >= idle else { return nil }
                guard let entry = state.entries.first(where: { $0.id == id }) else {
                    state.pending[id] = nil
                    return nil
                }
                pending.consumer = consumer
                pending.deliveries += 1
                pending.lastDelivered = now
                state.pending[id] = pending
                return StreamDelivery(id: id, fields: entry.fields)
            }
        }
    }

    public func extendLease(_ ids: [String]) async throws {
        try stream.call("extendLease")
        stream.state.withLockedValue { state in
            for id in ids where state.pending[id] != nil {
                state.pending[id]?.consumer = consumer
                state.pending[id]?.lastDelivered = .now
            }
        }
    }

    public func settle(done: [String], failed: [(id: String, recorded: String)], appends: [StreamAppend]) async throws -> Int {
        try stream.call("settle")
        stream.state.withLockedValue { state in
            let finished = Set(done)
            let removedBeforeCursor = state.entries[..<state.cursor].filter { finished.contains($0.id) }.count
            state.entries.removeAll { finished.contains($0.id) }
            state.cursor -= removedBeforeCursor
            for id in done {
                state.pending[id] = nil
                state.errors[id] = nil
                state.attempts[id] = nil
            }
            let now = Int(Date().timeIntervalSince1970 * 1000)
            for (id, recorded) in failed {
                state.errors[id] = recorded
                let attempts = state.attempts[id, default: []] + [StreamAttempt(at: now, consumer: consumer, error: recorded)]
                state.attempts[id] = Array(attempts.suffix(StreamAttempt.kept))
            }
            state.appended += appends
        }
        return 0
    }

    public func recordedErrors(_ ids: [String]) async throws -> [String?] {
        stream.state.withLockedValue { state in ids.map { state.errors[$0] } }
    }

    public func deadLetter(_ id: String, deliveries: Int, error: String) async throws -> Int {
        try stream.call("deadLetter")
        return stream.state.withLockedValue { state in
            var fields = state.entries.first(where: { $0.id == id })?.fields ?? [:]
            fields[StreamDeadLetter.Field.originalID.rawValue] = Array(id.utf8)
            var attempts = state.attempts[id] ?? []
            if state.errors[id] == nil { attempts.append(StreamAttempt(at: 0, consumer: consumer, error: error)) }
            fields[StreamDeadLetter.Field.error.rawValue] = Array((state.errors[id] ?? error).utf8)
            fields[StreamDeadLetter.Field.deliveries.rawValue] = Array(String(deliveries).utf8)
            fields[StreamDeadLetter.Field.failedAt.rawValue] = Array("0".utf8)
            fields[StreamDeadLetter.Field.attempts.rawValue] = Array(attempts.suffix(StreamAttempt.kept).map(\.line).joined(separator: "\n").utf8)
            state.deadLetters.append(StreamDeadLetter(id: "\(state.deadLetters.count + 1)-0", fields: fields))
            if let index = state.entries.firstIndex(where: { $0.id == id }) {
                state.entries.remove(at: index)
                if index < state.cursor { state.cursor -= 1 }
            }
            state.pending[id] = nil
            state.errors[id] = nil
            state.attempts[id] = nil
            let trimmed = max(0, state.deadLetters.count - deadLetterMax)
            state.deadLetters.removeFirst(trimmed)
            return trimmed
        }
    }

    public func stats() async -> StreamStats? {
        stream.state.withLockedValue { state in
            let oldest = state.entries.first { state.pending[$0.id] != nil }.flatMap { Double($0.id.split(separator: "-")[0]) }
            return StreamStats(
                length: state.entries.count, pending: state.pending.count, oldestPendingMilliseconds: oldest,
                lag: state.entries.count - state.cursor, deadLetters: state.deadLetters.count)
        }
    }
}
