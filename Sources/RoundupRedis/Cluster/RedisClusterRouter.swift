import Logging
import NIOConcurrencyHelpers
import NIOCore

/// The cluster side of `RedisClient`: the slot map, a pool per primary, and the rules for a cluster's answers — `MOVED`
/// (the slot lives elsewhere now: remember it, learn the map again), `ASK` (the key is already on the node a slot is
/// migrating to: ask there once, after `ASKING`), and `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`, `BUSY`, `MASTERDOWN`,
/// `READONLY` (not now: try again, with backoff, within the caller's deadline).
final class RedisClusterRouter: Sendable {
    let configuration: RedisConfiguration
    private let group: any EventLoopGroup
    private let logger: Logger
    private let state = NIOLockedValueBox(State())

    /// Redirects one command follows at most: more means the map is changing faster than it can be learnt.
    static let maxRedirects = 5
    /// The map is learnt again at least this often, and at most this often when asked for it.
    static let refreshEvery = TimeAmount.seconds(30)
    static let refreshAtMost = TimeAmount.milliseconds(100)

    private struct State {
        var topology: RedisClusterTopology?
        /// The pool serving each slot (a `MOVED` changes one before the map is learnt again).
        var owners: [RedisNodePool?] = Array(repeating: nil, count: RedisHashSlot.count)
        var pools: [RedisNodeAddress: RedisNodePool] = [:]
        var refreshing: Task<RedisClusterTopology, any Error>?
        var refreshedAt: NIODeadline?
        var closed = false
    }

    init(configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.configuration = configuration
        self.group = eventLoopGroup
        self.logger = logger
    }

    // MARK: The map

    /// The map as last learnt (nil before the first).
    var topology: RedisClusterTopology? { state.withLockedValue { $0.topology } }

    /// The pool of the primary serving `slot`, if the map names one. Learns the map again in the background when it is
    /// old.
    func pool(serving slot: RedisHashSlot) -> RedisNodePool? {
        let (pool, stale) = state.withLockedValue { state -> (RedisNodePool?, Bool) in
            let stale = state.refreshedAt.map { NIODeadline.now() - $0 > Self.refreshEvery } ?? false
            return (state.owners[slot.value], stale && state.refreshing == nil)
        }
        if stale { refreshInBackground() }
        return pool
    }

    /// The pool of `address`, opened if new.
    func pool(at address: RedisNodeAddress) -> RedisNodePool {
        state.withLockedValue { state in pool(at: address, in: &state) }
    }

    private func pool(at address: RedisNodeAddress, in state: inout State) -> RedisNodePool {
        if let pool = state.pools[address] { return pool }
        let pool = RedisNodePool(configuration: configuration.node(address), eventLoopGroup: group, logger: logger)
        state.pools[address] = pool
        return pool
    }

    /// The pools of the primaries, in slot order (the map learnt first if it is not yet).
    func primaries() async throws -> [RedisNodePool] {
        let topology = try await currentTopology()
        return topology.shards.map { pool(at: $0.primary) }
    }

    /// The map, learnt first if it is not known yet.
    func currentTopology() async throws -> RedisClusterTopology {
        if let topology = state.withLockedValue({ $0.topology }) { return topology }
        return try await refresh()
    }

    func refreshInBackground() {
        Task { [self] in _ = try? await refresh() }
    }

    /// Learns the map again (one request at a time; a map learnt within `refreshAtMost` is kept). With a `deadline` (a
    /// command's), a refresh it starts asks nodes only until then, each within the time left, and a refresh already
    /// under way is waited for only until then: past it, a typed `.timeout` (what was started goes on, for the next
    /// caller). Without one, each node is given its own connect and command timeouts, as many nodes as it takes.
    @discardableResult
    func refresh(deadline: NIODeadline? = nil) async throws -> RedisClusterTopology {
        let task = state.withLockedValue { state -> Task<RedisClusterTopology, any Error>? in
            if let running = state.refreshing { return running }
            if state.topology != nil, let at = state.refreshedAt, NIODeadline.now() - at < Self.refreshAtMost { return nil }
            // The task keeps the map itself: its callers may all have stopped waiting by the time it ends.
            let task = Task { [self] in
                do {
                    let topology = try await learn(until: deadline)
                    apply(topology)
                    return topology
                } catch {
                    self.state.withLockedValue { state in
                        state.refreshing = nil
                        state.refreshedAt = .now()
                    }
                    throw error
                }
            }
            state.refreshing = task
            return task
        }
        guard let task else { return try await currentTopology() }
        guard let deadline else { return try await task.value }
        return try await value(of: task, until: deadline)
    }

    /// `task`'s value, or a typed `.timeout` once `deadline` passes, whichever comes first (the task goes on).
    private func value(of task: Task<RedisClusterTopology, any Error>, until deadline: NIODeadline) async throws -> RedisClusterTopology {
        let late = RedisClientError(.timeout, "the cluster's map was not learnt within the command's deadline")
        guard deadline > .now() else { throw late }
        let waiting = NIOLockedValueBox<CheckedContinuation<RedisClusterTopology, any Error>?>(nil)
        let finish: @Sendable (Result<RedisClusterTopology, any Error>) -> Void = { result in
            waiting.withLockedValue { waiting in
                defer { waiting = nil }
                return waiting
            }?.resume(with: result)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiting.withLockedValue { $0 = continuation }
                let timer = group.next().scheduleTask(deadline: deadline) { finish(.failure(late)) }
                Task {
                    let result = await Result(awaiting: { try await task.value })
                    timer.cancel()
                    finish(result)
                }
            }
        } onCancel: {
            finish(.failure(CancellationError()))
        }
    }

    /// Asks the known primaries, then the seeds, for the map; the first that covers every slot wins, else the one that
    /// covers most. With a `deadline`, no node is asked once it has passed, and none is given longer than what is left.
    private func learn(until deadline: NIODeadline?) async throws -> RedisClusterTopology {
        let known = state.withLockedValue { $0.topology?.shards.map(\.primary) ?? [] }
        var candidates: [RedisNodeAddress] = []
        for address in known + configuration.seeds where !candidates.contains(address) { candidates.append(address) }
        var best: RedisClusterTopology?
        var lastError: (any Error)?
        var asked = 0
        for address in candidates {
            if let deadline, deadline <= .now() { break }
            asked += 1
            do {
                let topology = try await describe(by: address, until: deadline)
                if topology.coveredSlots == RedisHashSlot.count { return topology }
                if topology.coveredSlots > (best?.coveredSlots ?? -1) { best = topology }
            } catch {
                lastError = error
            }
        }
        if let best { return best }
        if asked < candidates.count {
            throw RedisClientError(
                .timeout, "the cluster's map was not learnt within the command's deadline (\(asked) of \(candidates.count) nodes asked)")
        }
        throw lastError ?? RedisClientError(.connectionFailed, "no node of the cluster answered (seeds: \(configuration.seeds))")
    }

    /// The time a step may take: its own timeout, or what is left before `deadline` if that is less (a typed
    /// `.timeout` when nothing is).
    private static func budget(_ own: TimeAmount, until deadline: NIODeadline?) throws -> TimeAmount {
        guard let deadline else { return own }
        let left = deadline - .now()
        guard left > .zero else { throw RedisClientError(.timeout, "the command's deadline passed while the cluster's map was learnt") }
        return min(own, left)
    }

    /// The map as `address` describes it, within `deadline` if there is one.
    private func describe(by address: RedisNodeAddress, until deadline: NIODeadline?) async throws -> RedisClusterTopology {
        var node = configuration.node(address)
        node.connectTimeout = try Self.budget(configuration.connectTimeout, until: deadline)
        let connection = try await RedisConnection.connect(node, on: group.next()).get()
        defer { connection.close().whenComplete { _ in } }
        let shards = try await connection.pipeline(
            [RedisCommand("CLUSTER", ["SHARDS"])], timeout: try Self.budget(configuration.commandTimeout, until: deadline)
        ).get()[0]
        if case .error(let message) = shards {
            // A Redis older than 7 has no CLUSTER SHARDS; one not in cluster mode refuses both.
            guard RedisErrorCode(reply: message) == .err else { throw RedisClientError.reply(message, answering: "CLUSTER SHARDS") }
            let slots = try await connection.send(
                RedisCommand("CLUSTER", ["SLOTS"]), timeout: try Self.budget(configuration.commandTimeout, until: deadline)
            ).get()
            guard let topology = RedisClusterTopology(slotsReply: slots, host: address.host) else {
                throw RedisClientError(.unexpectedReply, "CLUSTER SLOTS from \(address) has an unexpected shape")
            }
            return topology
        }
        guard let topology = RedisClusterTopology(shardsReply: shards, host: address.host) else {
            throw RedisClientError(.unexpectedReply, "CLUSTER SHARDS from \(address) has an unexpected shape")
        }
        return topology
    }

    private func apply(_ topology: RedisClusterTopology) {
        let retired = state.withLockedValue { state -> [RedisNodePool] in
            state.refreshing = nil
            state.refreshedAt = .now()
            if state.topology != topology {
                logger.notice(
                    "redis cluster map learnt",
                    metadata: [
                        "primaries": "\(topology.shards.map(\.primary.description))", "slots": "\(topology.coveredSlots)",
                    ])
            }
            state.topology = topology
            var owners = [RedisNodePool?](repeating: nil, count: RedisHashSlot.count)
            var used: Set<RedisNodeAddress> = []
            for shard in topology.shards {
                let pool = pool(at: shard.primary, in: &state)
                used.insert(shard.primary)
                for range in shard.slots { for slot in range { owners[slot] = pool } }
            }
            state.owners = owners
            let gone = state.pools.filter { !used.contains($0.key) }
            for address in gone.keys { state.pools[address] = nil }
            return Array(gone.values)
        }
        guard !retired.isEmpty else { return }
        // Requests in flight on a node that left the map finish or fail by themselves; its connections close later.
        Task {
            try? await Task.sleep(for: .seconds(10))
            for pool in retired { await pool.shutdown() }
        }
    }

    /// A `MOVED`: the slot lives on `address` now.
    private func moved(_ redirect: RedisRedirect) {
        state.withLockedValue { state in
            state.owners[redirect.slot.value] = pool(at: redirect.address, in: &state)
        }
        refreshInBackground()
    }

    // MARK: Commands

    private struct Attempt {
        var index: Int
        /// Where to ask once with `ASKING` (an `ASK` redirect), instead of the slot's owner.
        var asking: RedisNodeAddress?
        var redirects = 0
    }

    /// Runs `commands`, each on the primary serving its key (commands naming none on any primary), in one pipeline per
    /// node keeping their order there, following redirects and retrying what the cluster cannot do now until
    /// `timeout` (the configured command timeout if nil) has passed. Returns the replies in the commands' order, error
    /// replies included; throws when a node cannot be reached in time or a connection fails with commands in flight
    /// (they may have run: only the caller knows whether running them again is safe).
    ///
    /// `then` (with one command: its `WAIT`) is sent right after the command on the same connection, wherever the
    /// command goes, and its reply is appended.
    func execute(_ commands: [RedisCommand], timeout: TimeAmount?, then: RedisCommand? = nil) async throws -> [RedisValue] {
        try await execute(commands, timeout: timeout, then: then, partial: false).map { try $0.get() }
    }

    /// `execute`, each command's own outcome: a node that cannot be reached, or whose connection fails, fails its
    /// commands only, and the others' replies are kept (a read that delivered stream entries must not be dropped).
    func executeEach(_ commands: [RedisCommand], timeout: TimeAmount?) async -> [Result<RedisValue, any Error>] {
        (try? await execute(commands, timeout: timeout, then: nil, partial: true)) ?? commands.map { _ in .failure(CancellationError()) }
    }

    private func execute(
        _ commands: [RedisCommand], timeout: TimeAmount?, then: RedisCommand?, partial: Bool
    ) async throws -> [Result<RedisValue, any Error>] {
        precondition(then == nil || commands.count == 1, "a command sent after another follows one command")
        var failed: [Int: any Error] = [:]
        var thenReply: RedisValue?
        let deadline = NIODeadline.now() + (timeout ?? configuration.commandTimeout)
        if state.withLockedValue({ $0.topology == nil }) { try await refresh(deadline: deadline) }
        var replies = [RedisValue?](repeating: nil, count: commands.count)
        var todo = commands.indices.map { Attempt(index: $0) }
        var round = 0
        var unreachable: (any Error)?
        while !todo.isEmpty {
            // Group by node, keeping order within each.
            var order: [RedisNodeAddress] = []
            var groups: [RedisNodeAddress: (pool: RedisNodePool, attempts: [Attempt])] = [:]
            var uncovered: [Attempt] = []
            for attempt in todo {
                let pool: RedisNodePool?
                if let asking = attempt.asking {
                    pool = self.pool(at: asking)
                } else {
                    switch commands[attempt.index].route {
                    case .slot(let slot): pool = self.pool(serving: slot)
                    case .anyNode:
                        pool = state.withLockedValue { state in state.topology?.shards.first.map { self.pool(at: $0.primary, in: &state) } }
                    }
                }
                guard let pool else {
                    uncovered.append(attempt)
                    continue
                }
                if groups[pool.address] == nil {
                    order.append(pool.address)
                    groups[pool.address] = (pool, [])
                }
                groups[pool.address]!.attempts.append(attempt)
            }
            let remaining = deadline - .now()
            var again = uncovered
            var pause = !uncovered.isEmpty
            var learn = !uncovered.isEmpty
            if remaining > .zero {
                let results = await withTaskGroup(of: (RedisNodeAddress, Result<[RedisValue], any Error>).self) { tasks in
                    for address in order {
                        let (pool, attempts) = groups[address]!
                        var batch: [RedisCommand] = []
                        batch.reserveCapacity(attempts.count)
                        for attempt in attempts {
                            if attempt.asking != nil { batch.append(RedisCommand("ASKING")) }
                            batch.append(commands[attempt.index])
                            if let then { batch.append(then) }
                        }
                        let sent = batch
                        tasks.addTask { (address, await Result(awaiting: { try await pool.pipeline(sent, timeout: remaining).get() })) }
                    }
                    var all: [RedisNodeAddress: Result<[RedisValue], any Error>] = [:]
                    for await (address, result) in tasks { all[address] = result }
                    return all
                }
                for address in order {
                    let attempts = groups[address]!.attempts
                    switch results[address]! {
                    case .failure(let error):
                        learn = true
                        // Nothing was sent on a connection that never opened: those commands are safe to send again.
                        guard let failure = error as? RedisClientError, failure.code == .connectionFailed else {
                            guard partial else { throw error }
                            for attempt in attempts { failed[attempt.index] = error }
                            continue
                        }
                        unreachable = failure
                        pause = true
                        again += attempts
                    case .success(let values):
                        var at = 0
                        for var attempt in attempts {
                            if attempt.asking != nil { at += 1 }  // ASKING's own OK
                            let value = values[at]
                            at += 1
                            if then != nil {
                                thenReply = values[at]
                                at += 1
                            }
                            guard case .error(let message) = value else {
                                replies[attempt.index] = value
                                continue
                            }
                            replies[attempt.index] = value
                            let code = RedisErrorCode(reply: message)
                            switch code {
                            case .moved, .ask:
                                guard attempt.redirects < Self.maxRedirects, let redirect = RedisRedirect(reply: message, host: address.host) else {
                                    continue
                                }
                                attempt.redirects += 1
                                if redirect.kind == .moved {
                                    moved(redirect)
                                    attempt.asking = nil
                                } else {
                                    attempt.asking = redirect.address
                                }
                                again.append(attempt)
                            case .tryAgain, .clusterDown, .loading, .busy, .masterDown, .readOnly:
                                attempt.asking = nil
                                again.append(attempt)
                                pause = true
                                if code == .clusterDown || code == .readOnly || code == .masterDown { learn = true }
                            default:
                                continue
                            }
                        }
                    }
                }
            } else {
                again = todo
            }
            todo = again
            guard !todo.isEmpty else { break }
            let left = deadline - .now()
            guard left > .zero else { break }
            if learn { _ = try? await refresh(deadline: deadline) }
            if pause {
                round += 1
                let backoff = TimeAmount.milliseconds(Int64(min(200, 5 << min(round, 6))))
                let wait = min(backoff, deadline - .now())
                if wait > .zero { try? await Task.sleep(nanoseconds: UInt64(wait.nanoseconds)) }
            }
        }
        // Out of time: a command that got an answer returns it (its error reply); one no node answered fails (all of
        // them, unless `partial`).
        for attempt in todo where replies[attempt.index] == nil && failed[attempt.index] == nil {
            let error = unreachable ?? RedisClientError(.timeout, "the cluster did not serve \(commands[attempt.index].name) within its deadline")
            guard partial else { throw error }
            failed[attempt.index] = error
        }
        if !partial, let first = failed.values.first { throw first }
        var outcomes: [Result<RedisValue, any Error>] = commands.indices.map { index in
            if let error = failed[index] { return .failure(error) }
            return .success(replies[index] ?? .null)
        }
        if then != nil { outcomes.append(.success(thenReply ?? .null)) }
        return outcomes
    }

    /// A connection of its own to the primary serving `slot`, for a blocking read.
    func dedicatedConnection(serving slot: RedisHashSlot) async throws -> RedisConnection {
        do {
            return try await owner(of: slot).dedicatedConnection().get()
        } catch let error as RedisClientError where error.code == .connectionFailed {
            // The primary it knew may be gone (a failover): learn the map again and try its successor once.
            try await refresh()
            return try await owner(of: slot).dedicatedConnection().get()
        }
    }

    /// The pool of the primary serving `slot`, the map learnt (again) if it names none.
    func owner(of slot: RedisHashSlot) async throws -> RedisNodePool {
        _ = try await currentTopology()
        if let pool = pool(serving: slot) { return pool }
        if let shard = try await refresh().shard(serving: slot) { return pool(at: shard.primary) }
        throw RedisClientError(.server, "no primary serves slot \(slot)", replyCode: .clusterDown)
    }

    func shutdown() async {
        let pools = state.withLockedValue { state -> [RedisNodePool] in
            state.closed = true
            state.refreshing?.cancel()
            return Array(state.pools.values)
        }
        for pool in pools { await pool.shutdown() }
    }
}
