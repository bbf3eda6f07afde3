import Foundation
import NIOConcurrencyHelpers
import NIOCore
public import RoundupRedis

/// `StreamDriver` over one logical stream kept as several Redis streams (the webhook shards), each with its own
/// dead letters and errors in its own slot. Entries are named `<part>:<id>` (`ShardedEntryID`), so acknowledging,
/// claiming, recording an error or dead-lettering goes to the stream the entry came from.
///
/// Reading: on a standalone Redis one `XREADGROUP … BLOCK` names every stream (one round trip, woken by the first
/// entry); in a cluster a command may name keys of one slot only, so each round reads every stream without blocking,
/// one pipeline per primary, and an empty round waits a little (5 ms, doubling to 100 ms) before the next; the round
/// after an empty one reads one entry per shard, as a blocked read wakes with what arrived first. `XREADGROUP`
/// counts per stream, so a round may deliver more than asked: the rest waits here for the next `read` (it is pending
/// for this consumer meanwhile; what waits longer than `heldAtMost` is left to the claim of idle entries instead).
///
/// A `legacy` part (the single stream of the versions before shards) is read first and alone until it is drained, so an
/// account's older entries are applied before its newer ones; then it is removed.
public final class ShardedStreamDriver: StreamDriver {
    public let parts: [RedisStreamDriver]
    public let legacy: RedisStreamDriver?
    let redis: RedisClient
    public static let heldAtMost: Duration = .seconds(5)
    private let state = NIOLockedValueBox(State())

    private struct State {
        var reader: RedisConnection?
        var held: [(delivery: StreamDelivery, at: ContinuousClock.Instant)] = []
        var nextPart = 0
        var idleRounds = 0
        var legacyDrained = false
        /// The shards' groups are made (until an error resets the driver: the consumer prepares before every read).
        var groupsMade = false
    }

    public init(redis: RedisClient, parts: [RedisStreamDriver], legacy: RedisStreamDriver? = nil) {
        precondition(!parts.isEmpty, "a sharded stream has parts")
        self.redis = redis
        self.parts = parts
        self.legacy = legacy
    }

    private var all: [RedisStreamDriver] { parts + (legacy.map { [$0] } ?? []) }

    private func part(of id: String) throws -> (driver: RedisStreamDriver, id: String) {
        guard let entry = ShardedEntryID(id), entry.part < all.count else {
            throw RedisClientError(.unexpectedReply, "\(id) names no part of the sharded stream \(parts[0].stream)")
        }
        return (all[entry.part], entry.id)
    }

    private func byPart(_ ids: [String]) throws -> [(index: Int, ids: [String])] {
        var grouped: [Int: [String]] = [:]
        for id in ids {
            guard let entry = ShardedEntryID(id), entry.part < all.count else {
                throw RedisClientError(.unexpectedReply, "\(id) names no part of the sharded stream \(parts[0].stream)")
            }
            grouped[entry.part, default: []].append(entry.id)
        }
        return grouped.keys.sorted().map { ($0, grouped[$0]!) }
    }

    public func prepare() async throws {
        if state.withLockedValue({ $0.groupsMade && ($0.reader?.isActive == true || redis.isCluster) }) { return }
        try await createGroups()
        state.withLockedValue { $0.groupsMade = true }
        guard !redis.isCluster else { return }
        let connection = try await redis.dedicatedConnection(for: parts[0].stream).get()
        let previous = state.withLockedValue { state -> RedisConnection? in
            defer { state.reader = connection }
            return state.reader
        }
        previous?.close().whenComplete { _ in }
    }

    /// Every shard's group, in one pipeline per primary (the legacy part's is made as it is read) (a group that exists answers BUSYGROUP, which is fine).
    private func createGroups() async throws {
        let group = parts[0].group
        let replies = try await redis.pipeline(
            parts.map { RedisCommand("XGROUP", ["CREATE", RedisArgument($0.stream), RedisArgument(group), "0", "MKSTREAM"]) })
        for reply in replies {
            if case .error(let message) = reply, RedisErrorCode(reply: message) != .busyGroup {
                // A Redis at its maxmemory refuses XGROUP CREATE: the groups that exist are still read.
                if RedisErrorCode(reply: message) == .oom { continue }
                throw RedisClientError.reply(message, answering: "XGROUP CREATE")
            }
        }
    }

    public func reset() async {
        let previous = state.withLockedValue { state -> RedisConnection? in
            defer {
                state.reader = nil
                state.groupsMade = false
            }
            return state.reader
        }
        previous?.close().whenComplete { _ in }
    }

    public func read(count: Int, block: Duration?) async throws -> [StreamDelivery] {
        if let held = takeHeld(count), !held.isEmpty { return held }
        if let legacy, !state.withLockedValue({ $0.legacyDrained }) {
            let entries = try await readLegacy(legacy, count: count)
            if let entries { return entries }
        }
        let deadline = ContinuousClock.now + (block ?? .zero)
        while true {
            let entries: [StreamDelivery]
            if let reader = state.withLockedValue({ $0.reader }) {
                entries = try await readAll(on: reader, count: count, block: block)
            } else {
                // After an idle round, one entry per shard, as a blocked read wakes with what arrived first: a worker
                // paused meanwhile holds little it may not process, and the next read takes full batches.
                let waking = state.withLockedValue { $0.idleRounds > 0 }
                entries = try await readEachPart(count: waking ? 1 : count)
            }
            if !entries.isEmpty {
                state.withLockedValue { $0.idleRounds = 0 }
                return keep(entries, count: count)
            }
            let wait = state.withLockedValue { state -> Duration in
                state.idleRounds += 1
                return .milliseconds(min(100, 5 << min(state.idleRounds, 5)))
            }
            let left = deadline - .now
            guard block != nil, left > .zero, state.withLockedValue({ $0.reader == nil }) else { return [] }
            try await Task.sleep(for: min(wait, left))
        }
    }

    /// The legacy part's next entries; nil once it is drained (nothing left, nothing pending), when it is removed.
    private func readLegacy(_ legacy: RedisStreamDriver, count: Int) async throws -> [StreamDelivery]? {
        let index = parts.count
        guard try await redis.send(RedisCommand("EXISTS", [RedisArgument(legacy.stream)])).int == 1 else {
            state.withLockedValue { $0.legacyDrained = true }
            return nil
        }
        try await redis.createGroupIfMissing(stream: legacy.stream, group: legacy.group)
        let reply = try await redis.send(
            RedisCommand(
                "XREADGROUP",
                [
                    "GROUP", RedisArgument(legacy.group), RedisArgument(legacy.consumer), "COUNT", RedisArgument(count), "STREAMS",
                    RedisArgument(legacy.stream), ">",
                ]))
        let entries = RedisStreamDriver.deliveries(read: reply)
        if !entries.isEmpty { return entries.map { StreamDelivery(id: ShardedEntryID(part: index, id: $0.id).description, fields: $0.fields) } }
        let summary = try await redis.send(RedisCommand("XPENDING", [RedisArgument(legacy.stream), RedisArgument(legacy.group)]))
        if (summary.array?.first?.int ?? 0) > 0 { return [] }
        // Drained: remove it, unless something was appended meanwhile (an ingress of the old version still running).
        let removed = try await redis.evaluate(
            Self.removeDrained, keys: [RedisArgument(legacy.stream), RedisArgument(legacy.errors ?? legacy.stream + ":errors")], arguments: [])
        if removed.int == 1 { state.withLockedValue { $0.legacyDrained = true } }
        return removed.int == 1 ? nil : []
    }

    /// Standalone: one XREADGROUP naming every part, blocking up to `block`.
    private func readAll(on reader: RedisConnection, count: Int, block: Duration?) async throws -> [StreamDelivery] {
        let group = parts[0]
        var arguments: [RedisArgument] = ["GROUP", RedisArgument(group.group), RedisArgument(group.consumer), "COUNT", RedisArgument(count)]
        if let block { arguments += ["BLOCK", RedisArgument(RedisStreamDriver.milliseconds(block))] }
        arguments.append("STREAMS")
        let start = rotation()
        let order = (0..<parts.count).map { (start + $0) % parts.count }
        for index in order { arguments.append(RedisArgument(parts[index].stream)) }
        for _ in order { arguments.append(">") }
        let timeout = TimeAmount.milliseconds(Int64(RedisStreamDriver.milliseconds(block ?? .zero))) + .seconds(5)
        let reply = try await reader.send(RedisCommand("XREADGROUP", arguments), timeout: timeout).get()
        return deliveries(read: reply)
    }

    /// Cluster: every part without blocking, one pipeline per primary.
    private func readEachPart(count: Int) async throws -> [StreamDelivery] {
        let start = rotation()
        let order = (0..<parts.count).map { (start + $0) % parts.count }
        let commands = order.map { index in
            let part = parts[index]
            return RedisCommand(
                "XREADGROUP",
                [
                    "GROUP", RedisArgument(part.group), RedisArgument(part.consumer), "COUNT", RedisArgument(count), "STREAMS",
                    RedisArgument(part.stream), ">",
                ])
        }
        // Each primary on its own: entries a reachable primary delivered are kept (pending with this consumer, they
        // would wait for a claim, and an account's later entries would overtake them) when another cannot be reached.
        let outcomes = await redis.pipelineEach(commands)
        var entries: [StreamDelivery] = []
        var failure: (any Error)?
        for outcome in outcomes {
            switch outcome {
            case .success(.error(let message)):
                // A group lost with its stream (a key evicted, a primary replaced without its data): made again at the
                // next prepare.
                failure = RedisClientError.reply(message, answering: "XREADGROUP")
            case .success(let reply):
                entries += deliveries(read: reply)
            case .failure(let error):
                failure = error
            }
        }
        if let failure, entries.isEmpty { throw failure }
        return entries
    }

    private func rotation() -> Int {
        state.withLockedValue { state in
            defer { state.nextPart = (state.nextPart + 1) % parts.count }
            return state.nextPart
        }
    }

    /// An XREADGROUP reply with entries named by their part.
    private func deliveries(read reply: RedisValue) -> [StreamDelivery] {
        guard let streams = reply.array else { return [] }
        var entries: [StreamDelivery] = []
        for stream in streams {
            guard let pair = stream.array, pair.count == 2, let name = pair[0].string, let index = parts.firstIndex(where: { $0.stream == name })
            else {
                continue
            }
            for entry in pair[1].streamEntries {
                entries.append(StreamDelivery(id: ShardedEntryID(part: index, id: entry.id).description, fields: entry.fields))
            }
        }
        return entries
    }

    /// The first `count` of a round; the rest waits for the next read.
    private func keep(_ entries: [StreamDelivery], count: Int) -> [StreamDelivery] {
        guard entries.count > count else { return entries }
        let now = ContinuousClock.now
        state.withLockedValue { state in state.held += entries.dropFirst(count).map { ($0, now) } }
        return Array(entries.prefix(count))
    }

    private func takeHeld(_ count: Int) -> [StreamDelivery]? {
        state.withLockedValue { state in
            let now = ContinuousClock.now
            state.held.removeAll { now - $0.at > Self.heldAtMost }
            guard !state.held.isEmpty else { return nil }
            let taken = state.held.prefix(count).map(\.delivery)
            state.held.removeFirst(taken.count)
            return taken
        }
    }

    static let removeDrained = RedisScript(
        name: "legacy-stream-drained",
        source: """
            if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[2]) return 1 end
            return 0
            """)

    public func pending(idle: Duration, count: Int) async throws -> [StreamPendingEntry] {
        let commands = all.map { part in
            RedisCommand(
                "XPENDING",
                [
                    RedisArgument(part.stream), RedisArgument(part.group), "IDLE", RedisArgument(RedisStreamDriver.milliseconds(idle)), "-", "+",
                    RedisArgument(count),
                ])
        }
        let replies = try await redis.pipeline(commands)
        var entries: [(StreamPendingEntry, Double)] = []
        for (index, reply) in replies.enumerated() {
            for item in reply.array ?? [] {
                guard let fields = item.array, fields.count >= 4, let id = fields[0].string, let deliveries = fields[3].int else { continue }
                entries.append(
                    (
                        StreamPendingEntry(id: ShardedEntryID(part: index, id: id).description, deliveries: deliveries),
                        StreamStats.milliseconds(ofID: id) ?? 0
                    ))
            }
        }
        return entries.sorted { $0.1 < $1.1 }.prefix(count).map(\.0)
    }

    public func claim(_ ids: [String], idle: Duration) async throws -> [StreamDelivery] {
        var claimed: [StreamDelivery] = []
        for (index, local) in try byPart(ids) {
            claimed += try await all[index].claim(local, idle: idle).map {
                StreamDelivery(id: ShardedEntryID(part: index, id: $0.id).description, fields: $0.fields)
            }
        }
        return claimed
    }

    public func extendLease(_ ids: [String]) async throws {
        for (index, local) in try byPart(ids) { try await all[index].extendLease(local) }
    }

    public func settle(done: [String], failed: [(id: String, recorded: String)], appends: [StreamAppend]) async throws -> Int {
        var commands: [RedisCommand] = []
        for (index, local) in try byPart(done) {
            let part = all[index]
            if let command = part.settleWithLoad(local) {
                commands.append(command)
                continue
            }
            let ids = local.map { RedisArgument($0) }
            commands.append(RedisCommand("XACK", [RedisArgument(part.stream), RedisArgument(part.group)] + ids))
            commands.append(RedisCommand("XDEL", [RedisArgument(part.stream)] + ids))
            if let errors = part.errors { commands.append(RedisCommand("HDEL", [RedisArgument(errors)] + StreamAttempt.fieldsToForget(local))) }
        }
        let essential = commands.count
        commands += appends.map(\.command)
        let now = Int(Date().timeIntervalSince1970 * 1000)
        for (id, recorded) in failed {
            let (part, local) = try part(of: id)
            if let errors = part.errors {
                commands.append(StreamAttempt.recordCommand(errors: errors, id: local, recorded: recorded, consumer: part.consumer, now: now))
            }
        }
        guard !commands.isEmpty else { return 0 }
        // Each primary on its own: the shards a reachable primary holds are settled even when another cannot be
        // reached (its entries stay pending and are settled when they are claimed again).
        let outcomes = await redis.pipelineEach(commands)
        for outcome in outcomes.prefix(essential) {
            switch outcome {
            case .failure(let error): throw error
            case .success(.error(let message)): throw RedisClientError.reply(message, answering: "settling batch")
            case .success: continue
            }
        }
        return outcomes.dropFirst(essential).filter { outcome in
            if case .success(let reply) = outcome { return reply.isError }
            return true
        }.count
    }

    public func recordedErrors(_ ids: [String]) async throws -> [String?] {
        var found: [String: String] = [:]
        for (index, local) in try byPart(ids) {
            let errors = try await all[index].recordedErrors(local)
            for (id, error) in zip(local, errors) { found[ShardedEntryID(part: index, id: id).description] = error }
        }
        return ids.map { found[$0] ?? nil }
    }

    public func deadLetter(_ id: String, deliveries: Int, error: String) async throws -> Int {
        let (part, local) = try part(of: id)
        return try await part.deadLetter(local, deliveries: deliveries, error: error)
    }

    /// The parts' figures summed (lengths, pending, lag, dead letters) and their oldest (pending, waiting), read in
    /// one pipeline per primary.
    public func stats() async -> StreamStats? {
        let commands = all.map(\.statsCommands)
        guard let replies = try? await redis.pipeline(commands.flatMap { $0 }) else { return nil }
        var total = StreamStats(length: 0, pending: 0, lag: 0, deadLetters: 0)
        var at = 0
        var waiting: [(RedisStreamDriver, String)] = []
        for (part, sent) in zip(all, commands) {
            let (stats, lastDelivered) = part.stats(from: replies[at..<(at + sent.count)])
            at += sent.count
            total.length = (total.length ?? 0) + (stats.length ?? 0)
            total.pending = (total.pending ?? 0) + (stats.pending ?? 0)
            total.lag = (total.lag ?? 0) + (stats.lag ?? 0)
            total.deadLetters = (total.deadLetters ?? 0) + (stats.deadLetters ?? 0)
            total.oldestPendingMilliseconds = [total.oldestPendingMilliseconds, stats.oldestPendingMilliseconds].compactMap { $0 }.min()
            if let lastDelivered { waiting.append((part, lastDelivered)) }
        }
        for (part, lastDelivered) in waiting {
            let oldest = try? await RedisStreamDriver.oldestWaiting(redis: redis, stream: part.stream, after: lastDelivered)
            total.oldestWaitingMilliseconds = [total.oldestWaitingMilliseconds, oldest ?? nil].compactMap { $0 }.min()
        }
        return total
    }
}

/// An entry of a sharded stream: the part (shard) it is in and its id there, written `<part>:<id>` (`7:1700000000000-0`;
/// a colon is at home in a URL's path segment and a shell's argument).
public struct ShardedEntryID: Sendable, Hashable, CustomStringConvertible {
    public var part: Int
    public var id: String

    public init(part: Int, id: String) {
        self.part = part
        self.id = id
    }

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), let part = Int(text[..<colon]), part >= 0 else { return nil }
        let id = text[text.index(after: colon)...]
        guard !id.isEmpty else { return nil }
        self.part = part
        self.id = String(id)
    }

    public var description: String { "\(part):\(id)" }
}
