import NIOConcurrencyHelpers
public import NIOCore

/// A small thread-safe cache whose entries expire, bounded in entries and in bytes: what a flood of unique keys can
/// make it hold is fixed in advance. Full, it first drops what has expired, then the oldest entries. Keys should be
/// checked for their shape (and so their length) by the caller before they get here.
public final class ExpiringCache<Value: Sendable>: Sendable {
    private struct Entry {
        var value: Value
        var expires: NIODeadline
        var cost: Int
        var sequence: UInt64
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// Keys in insertion order with the sequence they were inserted with (a re-inserted key's old slot is stale).
        var order: [(key: String, sequence: UInt64)] = []
        var head = 0
        var bytes = 0
        var sequence: UInt64 = 0
    }

    private let maxEntries: Int
    private let maxBytes: Int
    private let cost: @Sendable (Value) -> Int
    private let state = NIOLockedValueBox(State())

    /// `cost` is the size a value adds beyond its key.
    public init(maxEntries: Int, maxBytes: Int, cost: @escaping @Sendable (Value) -> Int) {
        self.maxEntries = max(1, maxEntries)
        self.maxBytes = max(1, maxBytes)
        self.cost = cost
    }

    public func value(for key: String, now: NIODeadline = .now()) -> Value? {
        state.withLockedValue { state in
            guard let entry = state.entries[key] else { return nil }
            guard entry.expires > now else {
                state.entries[key] = nil
                state.bytes -= entry.cost
                return nil
            }
            return entry.value
        }
    }

    public func set(_ value: Value, for key: String, lifetime: TimeAmount, now: NIODeadline = .now()) {
        let entryCost = key.utf8.count + cost(value) + 64
        guard entryCost <= maxBytes else { return }
        state.withLockedValue { state in
            if let old = state.entries[key] { state.bytes -= old.cost }
            state.sequence &+= 1
            state.entries[key] = Entry(value: value, expires: now + lifetime, cost: entryCost, sequence: state.sequence)
            state.bytes += entryCost
            state.order.append((key, state.sequence))
            if state.entries.count > maxEntries || state.bytes > maxBytes {
                evict(&state, now: now)
            }
            compact(&state)
        }
    }

    public func remove(_ key: String) {
        state.withLockedValue { state in
            guard let entry = state.entries.removeValue(forKey: key) else { return }
            state.bytes -= entry.cost
        }
    }

    public var count: Int { state.withLockedValue { $0.entries.count } }
    public var bytes: Int { state.withLockedValue { $0.bytes } }

    private func evict(_ state: inout State, now: NIODeadline) {
        // What has expired goes first (one pass), then the oldest until within both bounds.
        for (key, entry) in state.entries where entry.expires <= now {
            state.entries[key] = nil
            state.bytes -= entry.cost
        }
        while state.entries.count > maxEntries || state.bytes > maxBytes, state.head < state.order.count {
            let (key, sequence) = state.order[state.head]
            state.head += 1
            if let entry = state.entries[key], entry.sequence == sequence {
                state.entries[key] = nil
                state.bytes -= entry.cost
            }
        }
    }

    /// Drops the order's stale slots once they are most of it, so the order stays within a small multiple of the entries.
    private func compact(_ state: inout State) {
        guard state.order.count > 2 * maxEntries + 64 || state.head > state.order.count / 2 else { return }
        state.order = state.order[state.head...].filter { slot in state.entries[slot.key]?.sequence == slot.sequence }
        state.head = 0
    }
}
