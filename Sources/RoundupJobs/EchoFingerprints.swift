public import Logging
import Metrics
import NIOCore
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// Fingerprints of the values this server writes to Trello, so the webhook that echoes a write is not taken
/// for a user's edit. Set before the write, checked (not consumed) by the webhook worker, deleted once the
/// store has the written values' hashes (after which the hash comparison recognises the echo by itself).
public struct EchoFingerprints: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let ttlSeconds: Int

    public init(redis: RedisClient, keys: RedisKeys, ttlSeconds: Int) {
        self.redis = redis
        self.keys = keys
        self.ttlSeconds = ttlSeconds
    }

    public static let removedField = "_removed"
    /// The pseudo-field of a card's list: set before we move a card (`SyncEngine.move`) to the sync list it names.
    public static let listField = "_list"

    public func moveKey(account: String, card: String, syncList: String) -> String {
        fieldKey(account: account, card: card, field: Self.listField, value: .string(syncList))
    }

    public func fieldKey(account: String, card: String, field: String, value: JSONValue) -> String {
        keys.echo(account: account, card: card, field: field, hash: value.fieldHash)
    }

    public func createKey(account: String, syncList: String, title: String) -> String {
        keys.echoCreate(account: account, syncList: syncList, titleHash: JSONValue.string(SyncFields.normalizedTitle(title)).fieldHash)
    }

    /// Must succeed before the write: a write without its fingerprint could come back as an edit.
    public func mark(_ names: [String]) async throws {
        guard !names.isEmpty else { return }
        let replies = try await redis.pipeline(
            names.map { RedisCommand("SET", [RedisArgument($0), "1", "EX", RedisArgument(ttlSeconds)]) }, timeout: .seconds(2))
        if let failure = replies.lazy.compactMap(\.errorReply).first {
            throw RedisClientError.reply(failure, answering: "setting echo fingerprints")
        }
    }

    public func clear(_ names: [String]) async {
        guard !names.isEmpty else { return }
        // Several accounts' (slots') keys: one DEL per slot.
        _ = try? await redis.delete(names, timeout: .seconds(2))
    }

    /// Which of these fingerprints exist.
    public func present(_ names: [String]) async throws -> [Bool] {
        guard !names.isEmpty else { return [] }
        // A batch's fingerprints are of several accounts (slots): one MGET per slot.
        return try await redis.values(of: names, timeout: .seconds(2)).map { !$0.isNull }
    }
}

extension EchoFingerprints {
    /// Sets apart what our own writes to Trello caused: field values we wrote (fingerprinted before the write), cards we
    /// created (by list and title, until the store knows their ids) and cards we deleted. Field values and removals
    /// become `.echo` observations (recorded in the activity history, changing nothing); a create's echo is dropped. The field-hash comparison in
    /// the store catches echoes that arrive after the write was recorded; this catches the ones that arrive before.
    /// When Redis cannot answer, that comparison is all there is. `isLive` says whether the store holds the card as
    /// present (a card it does not know may be one we are creating).
    public func withoutEchoes(
        _ observations: [CardObservation], logger: Logger, isLive: (_ account: String, _ card: String) -> Bool
    ) async -> [CardObservation] {
        var names: [String] = []
        var ranges: [Range<Int>] = []
        for o in observations {
            let start = names.count
            switch o.kind {
            case .echo:
                break
            case .removed:
                names.append(fieldKey(account: o.accountID, card: o.cardID, field: Self.removedField, value: .bool(true)))
            case .fields(let fields, let full):
                for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
                    names.append(fieldKey(account: o.accountID, card: o.cardID, field: name, value: value))
                }
                if full, !isLive(o.accountID, o.cardID), let title = fields[SyncField.title]?.stringValue {
                    names.append(createKey(account: o.accountID, syncList: o.syncListID, title: title))
                }
                if full { names.append(moveKey(account: o.accountID, card: o.cardID, syncList: o.syncListID)) }
            }
            ranges.append(start..<names.count)
        }
        let present: [Bool]
        do {
            present = try await self.present(names)
        } catch {
            logger.warning("echo fingerprints unavailable", metadata: ["error": "\(error)"])
            return observations
        }
        var kept: [CardObservation] = []
        var suppressed = 0
        for (o, range) in zip(observations, ranges) {
            switch o.kind {
            case .echo:
                kept.append(o)
            case .removed:
                if present[range.lowerBound] {
                    suppressed += 1
                    kept.append(o.echoed([:]))
                } else {
                    kept.append(o)
                }
            case .fields(let fields, let full):
                let sortedNames = fields.keys.sorted()
                if full, present[range.upperBound - 1] {
                    suppressed += 1  // the card arriving where we are moving it: the move's store write says so
                    continue
                }
                if full, range.count > sortedNames.count + 1, present[range.upperBound - 2] {
                    suppressed += 1  // the create we are making
                    continue
                }
                var remaining = fields
                for (offset, name) in sortedNames.enumerated() where present[range.lowerBound + offset] {
                    remaining[name] = nil
                }
                if remaining.count < fields.count {
                    suppressed += 1
                    kept.append(o.echoed(fields.filter { remaining[$0.key] == nil }))
                }
                if remaining.isEmpty { continue }
                var copy = o
                copy.kind = .fields(remaining, full: full)
                kept.append(copy)
            }
        }
        if suppressed > 0 { Counter(label: "roundup_echo_suppressed_total").increment(by: suppressed) }
        return kept
    }
}

extension CardObservation {
    /// The part of this observation that was our own write, for the store to record and otherwise ignore.
    fileprivate func echoed(_ fields: [String: JSONValue]) -> CardObservation {
        var copy = self
        copy.kind = .echo(fields)
        return copy
    }
}
