import Foundation
public import Logging
public import Metrics
import NIOConcurrencyHelpers

/// The one loop every stream consumer runs (webhooks, jobs, pushes): read batches (the next one asked for while the
/// current one is processed), hold each batch's lease while it is handled, settle it (ack and delete, record errors,
/// append follow-ups), reclaim entries other consumers left idle, dead-letter entries delivered too often with their
/// typed failure, back off on errors, and export the `roundup_stream_*` gauges.
public struct StreamConsumer<Driver: StreamDriver, Handler: StreamHandler>: Sendable {
    public struct Options: Sendable {
        /// The stream's name in logs and in the gauges' `stream` label (`webhooks`, `jobs`, `push`).
        public var name: String
        public var consumer: String
        /// Entries handed to the handler at once.
        public var batchSize: Int
        /// Batches handled at once. With one, batches are handled in the loop and the next is read ahead (unless
        /// `readsAhead` is off).
        public var concurrency: Int
        /// Whether one batch at a time reads the next ahead. Off for jobs: an entry read ahead is pending with this
        /// consumer, where a running job asking whether others wait (`RedisStreamDriver.waiting`) cannot see it.
        public var readsAhead = true
        /// How long a read waits for new entries.
        public var block: Duration
        /// An entry pending this long with its consumer is taken over (that consumer died or gave it up).
        public var claimIdle: Duration
        /// How often to look for such entries (and record the gauges).
        public var reclaimEvery: Duration
        /// After an outage many entries wait at once: up to this many full pages are reclaimed before reading new ones.
        public var maxReclaimPages: Int
        /// An entry delivered this often is dead-lettered instead of reclaimed (nil: never).
        public var maxDeliveries: Int?
        /// Backoff after a driver error: the first wait, doubled up to the last.
        public var errorBackoff: ClosedRange<Duration>
        /// Backoff after a batch whose failures keep entries waiting (the store unreachable).
        public var dependencyBackoff: ClosedRange<Duration>

        public init(
            name: String, consumer: String, batchSize: Int, concurrency: Int = 1, block: Duration = .seconds(1), claimIdle: Duration,
            reclaimEvery: Duration? = nil, maxReclaimPages: Int = 64, maxDeliveries: Int? = nil,
            errorBackoff: ClosedRange<Duration> = .milliseconds(100) ... .seconds(5),
            dependencyBackoff: ClosedRange<Duration> = .milliseconds(200) ... .seconds(5)
        ) {
            self.name = name
            self.consumer = consumer
            self.batchSize = max(1, batchSize)
            self.concurrency = max(1, concurrency)
            self.block = block
            self.claimIdle = claimIdle
            self.reclaimEvery = reclaimEvery ?? min(.seconds(5), max(.milliseconds(100), claimIdle / 2))
            self.maxReclaimPages = max(1, maxReclaimPages)
            self.maxDeliveries = maxDeliveries
            self.errorBackoff = errorBackoff
            self.dependencyBackoff = dependencyBackoff
        }

        /// How often a lease is extended: a third of the claim timeout (20 ms to 10 s).
        public var leaseEvery: Duration { max(.milliseconds(20), min(.seconds(10), claimIdle / 3)) }
    }

    /// The metrics a consumer exports; nil counters are not counted.
    public struct MetricSet: Sendable {
        public enum StreamGauge: Sendable, Hashable, CaseIterable {
            case length, pending, oldestPendingAge, oldestWaitingAge, lag, deadLetters
        }

        /// `roundup_stream_*` gauges recorded for the stream (label `stream` = the options' name).
        public var gauges: Set<StreamGauge>
        public var reclaimed: Counter?
        public var deadLettered: Counter?
        public var deadLettersTrimmed: Counter?
        /// Bookkeeping writes Redis refused while a batch was settled.
        public var writesRefused: Counter?

        public init(
            gauges: Set<StreamGauge> = [.length, .pending, .oldestPendingAge], reclaimed: Counter? = nil, deadLettered: Counter? = nil,
            deadLettersTrimmed: Counter? = nil, writesRefused: Counter? = nil
        ) {
            self.gauges = gauges
            self.reclaimed = reclaimed
            self.deadLettered = deadLettered
            self.deadLettersTrimmed = deadLettersTrimmed
            self.writesRefused = writesRefused
        }
    }

    public let options: Options
    public let driver: Driver
    public let handler: Handler
    public let metrics: MetricSet
    let logger: Logger

    public init(options: Options, driver: Driver, handler: Handler, metrics: MetricSet = MetricSet(), logger: Logger) {
        self.options = options
        self.driver = driver
        self.handler = handler
        self.metrics = metrics
        self.logger = logger
    }

    /// Runs until cancelled or until `isStopping` says so (a graceful shutdown): then it reads no more, handles what was
    /// already delivered to it (the batch read ahead included) and waits for the batches in flight.
    ///
    /// While `isPaused` says so (an operator's `roundupctl pause`) it reads and reclaims nothing; batches in flight
    /// finish, and entries already delivered to it but not begun (a batch read ahead, or read as the pause came) stay
    /// pending with it, their lease renewed, and are handled first on resume. The gauges are still recorded.
    public func run(isStopping: @escaping @Sendable () -> Bool = { false }, isPaused: @escaping @Sendable () -> Bool = { false }) async {
        if options.concurrency == 1 && options.readsAhead {
            await runReadingAhead(isStopping: isStopping, isPaused: isPaused)
        } else {
            await runConcurrently(isStopping: isStopping, isPaused: isPaused)
        }
        await driver.reset()
        logger.notice("consumer stopped", metadata: ["stream": "\(options.name)", "consumer": "\(options.consumer)"])
    }

    /// An entry as the consumer holds it once read: its stream's message, or why it can never be one.
    enum Reading: Sendable {
        case message(Delivered<Handler.Message>)
        case undecodable(id: String, StreamUndecodable)

        var id: String {
            switch self {
            case .message(let delivered): delivered.id
            case .undecodable(let id, _): id
            }
        }
    }

    /// What the loop of either kind keeps between rounds.
    struct LoopState {
        var lastReclaim = ContinuousClock.now - .seconds(3600)
        var backoff: Duration
        var dependencyBackoff: Duration
        var prepared = false
        /// Delivered to this consumer while paused: pending with it, handled on resume (or reclaimed by another consumer
        /// if this one stops first).
        var held: [Reading] = []
        var lastLease = ContinuousClock.now
        /// Handed back by the handler for later (`StreamBatchResult.later`), in stream order: pending with this consumer,
        /// leased, handled again once their key is due.
        var deferred: [Reading] = []
        /// When each key with deferred entries is due; new entries of such a key join `deferred`.
        var dueAt: [String: ContinuousClock.Instant] = [:]
    }

    /// The key an entry is kept in order by (`StreamHandler.orderKey`, else the entry itself).
    func orderKey(_ reading: Reading) -> String {
        switch reading {
        case .message(let delivered): handler.orderKey(delivered.message) ?? delivered.id
        case .undecodable(let id, _): id
        }
    }

    /// Handles `batch` (the read-ahead loop), keeping the entries the handler hands back for later, and entries of
    /// their keys, in `state.deferred`. Returns whether a failure keeps entries waiting for a dependency.
    private func processKeepingOrder(_ batch: [Reading], state: inout LoopState, running: InFlight) async throws -> Bool {
        var now: [Reading] = []
        for reading in batch {
            if state.dueAt[orderKey(reading)] != nil {
                state.deferred.append(reading)
                running.hold([reading.id])
            } else {
                now.append(reading)
            }
        }
        guard !now.isEmpty else { return false }
        let handled = try await process(now, alsoLeased: state.deferred.map(\.id))
        guard !handled.later.isEmpty else { return handled.waits }
        let at = ContinuousClock.now
        var kept: [Reading] = []
        for reading in now {
            guard let wait = handled.later[reading.id] else { continue }
            let key = orderKey(reading)
            let due = at + min(max(wait, .milliseconds(20)), .seconds(60))
            state.dueAt[key] = max(state.dueAt[key] ?? due, due)
            kept.append(reading)
        }
        running.hold(kept.map(\.id))
        // In stream order: what was deferred before this batch stays ahead of it (those keys were not in `now`).
        state.deferred += kept
        return handled.waits
    }

    /// The deferred entries whose key is due, taken out of `state.deferred` (in stream order).
    private func dueDeferred(_ state: inout LoopState, running: InFlight) -> [Reading] {
        guard !state.deferred.isEmpty else { return [] }
        let now = ContinuousClock.now
        let dueKeys = Set(state.dueAt.filter { $0.value <= now }.keys)
        guard !dueKeys.isEmpty else { return [] }
        var due: [Reading] = []
        var rest: [Reading] = []
        for reading in state.deferred {
            if dueKeys.contains(orderKey(reading)) { due.append(reading) } else { rest.append(reading) }
        }
        state.deferred = rest
        for key in dueKeys { state.dueAt[key] = nil }
        running.release(due.map(\.id))
        return due
    }

    /// How long a read may block: until the next deferred key is due, at most `options.block`.
    private func readBlock(_ state: LoopState) -> Duration {
        guard let next = state.dueAt.values.min() else { return options.block }
        return max(.milliseconds(10), min(options.block, next - ContinuousClock.now))
    }

    /// One batch at a time, in the loop; the next batch is read (and decoded) ahead, while the current one is handled.
    private func runReadingAhead(isStopping: @escaping @Sendable () -> Bool, isPaused: @escaping @Sendable () -> Bool) async {
        var state = LoopState(backoff: options.errorBackoff.lowerBound, dependencyBackoff: options.dependencyBackoff.lowerBound)
        let running = InFlight()
        // The next batch is asked for before the current one is processed, so it arrives while we work.
        var prefetched: Task<[Reading], any Error>?
        while !Task.isCancelled {
            if isPaused() && !isStopping() {
                if let ahead = prefetched {
                    prefetched = nil
                    // A failed read leaves whatever it delivered pending: the reclaim finds it after the pause.
                    state.held += (try? await ahead.value) ?? []
                }
                await pausedRound(&state, inFlight: 0)
                continue
            }
            // Paused and stopping: what is held stays pending, for another consumer once the stream runs again.
            if !state.held.isEmpty, !isPaused() {
                let batch = state.held
                state.held = []
                await processLogging(batch)
                continue
            }
            if isStopping() {
                // Stop reading; entries already delivered to this consumer are still processed and settled. Deferred ones
                // stay pending: another consumer takes them over after the claim timeout.
                if !isPaused(), let ahead = prefetched, let batch = try? await ahead.value, !batch.isEmpty { await processLogging(batch) }
                break
            }
            do {
                try await prepare(&state)
                let due = dueDeferred(&state, running: running)
                if !due.isEmpty {
                    _ = try await processKeepingOrder(due, state: &state, running: running)
                }
                if !state.deferred.isEmpty, ContinuousClock.now - state.lastLease >= options.leaseEvery {
                    state.lastLease = .now
                    try await driver.extendLease(state.deferred.map(\.id))
                }
                if ContinuousClock.now - state.lastReclaim >= options.reclaimEvery {
                    state.lastReclaim = .now
                    for _ in 0..<options.maxReclaimPages {
                        let (seen, claimed) = try await reclaimPage(limit: options.batchSize, running: running)
                        // The store still failing: stop here, the next round tries again.
                        if !claimed.isEmpty, try await processKeepingOrder(claimed, state: &state, running: running) { break }
                        guard seen == options.batchSize else { break }
                    }
                    await recordGauges(inFlight: 0)
                }
                let count = options.batchSize
                let entries: [Reading]
                if let ahead = prefetched {
                    prefetched = nil
                    entries = try await ahead.value
                } else {
                    entries = decoded(try await driver.read(count: count, block: readBlock(state)))
                }
                if !entries.isEmpty && isPaused() {
                    // The pause came while the read waited: begin none of them.
                    state.held = entries
                    state.lastLease = .now
                } else if !entries.isEmpty {
                    // A full batch suggests more is waiting: ask for it now, without blocking, and decode it meanwhile.
                    if entries.count == count {
                        prefetched = Task { [driver] in self.decoded(try await driver.read(count: count, block: nil)) }
                    }
                    if try await processKeepingOrder(entries, state: &state, running: running) {
                        // A dependency is unreachable: stop taking new entries for a while; they wait in the stream.
                        try? await Task.sleep(for: state.dependencyBackoff)
                        state.dependencyBackoff = min(state.dependencyBackoff * 2, options.dependencyBackoff.upperBound)
                    } else {
                        state.dependencyBackoff = options.dependencyBackoff.lowerBound
                    }
                }
                state.backoff = options.errorBackoff.lowerBound
            } catch {
                if isStopping() && prefetched == nil { break }
                prefetched?.cancel()
                prefetched = nil
                await failedRound(&state, error: error)
            }
        }
        prefetched?.cancel()
    }

    /// Up to `concurrency` batches at once, each in a task of its own; the loop reads as many as there is room for.
    private func runConcurrently(isStopping: @escaping @Sendable () -> Bool, isPaused: @escaping @Sendable () -> Bool) async {
        let running = InFlight()
        await withDiscardingTaskGroup { tasks in
            var state = LoopState(backoff: options.errorBackoff.lowerBound, dependencyBackoff: options.dependencyBackoff.lowerBound)
            while !Task.isCancelled {
                if isPaused() && !isStopping() {
                    await pausedRound(&state, inFlight: running.entries)
                    continue
                }
                if !state.held.isEmpty, !isPaused() {
                    dispatch(state.held, running: running, into: &tasks)
                    state.held = []
                    continue
                }
                if isStopping() { break }
                do {
                    try await prepare(&state)
                    if ContinuousClock.now - state.lastReclaim >= options.reclaimEvery {
                        state.lastReclaim = .now
                        let free = options.concurrency - running.batches
                        if free > 0 {
                            let (_, claimed) = try await reclaimPage(limit: free * options.batchSize, running: running)
                            dispatch(claimed, running: running, into: &tasks)
                        }
                        await recordGauges(inFlight: running.entries)
                    }
                    let free = options.concurrency - running.batches
                    guard free > 0 else {
                        try await Task.sleep(for: .milliseconds(100))
                        continue
                    }
                    let entries = decoded(try await driver.read(count: options.batchSize * free, block: options.block))
                    if !entries.isEmpty && isPaused() {
                        state.held = entries
                        state.lastLease = .now
                    } else {
                        dispatch(entries, running: running, into: &tasks)
                    }
                    state.backoff = options.errorBackoff.lowerBound
                } catch {
                    if isStopping() { break }
                    await failedRound(&state, error: error)
                }
            }
            // Batches in flight finish (the task group waits for them); a handler that sees the shutdown may leave its
            // entries pending for another consumer.
        }
    }

    /// A round while paused: the held entries' lease renewed, the gauges recorded, a short wait.
    private func pausedRound(_ state: inout LoopState, inFlight: Int) async {
        if !(state.held.isEmpty && state.deferred.isEmpty), ContinuousClock.now - state.lastLease >= options.leaseEvery {
            state.lastLease = .now
            try? await driver.extendLease(state.held.map(\.id) + state.deferred.map(\.id))
        }
        if ContinuousClock.now - state.lastReclaim >= options.reclaimEvery {
            state.lastReclaim = .now
            await recordGauges(inFlight: inFlight + state.held.count)
        }
        try? await Task.sleep(for: .milliseconds(50))
    }

    private func prepare(_ state: inout LoopState) async throws {
        try await driver.prepare()
        if !state.prepared {
            state.prepared = true
            logger.info("consuming", metadata: ["stream": "\(options.name)", "consumer": "\(options.consumer)"])
        }
    }

    /// After a driver error: the reading connection dropped, a wait that doubles each time.
    private func failedRound(_ state: inout LoopState, error: any Error) async {
        logger.warning("consumer loop error", metadata: ["stream": "\(options.name)", "error": "\(error)"])
        await driver.reset()
        state.prepared = false
        try? await Task.sleep(for: state.backoff)
        state.backoff = min(state.backoff * 2, options.errorBackoff.upperBound)
    }

    /// Entries read as the stream's messages (`StreamHandler.decode`).
    func decoded(_ entries: [StreamDelivery]) -> [Reading] {
        entries.map { entry in
            do throws(StreamUndecodable) {
                return .message(Delivered(id: entry.id, message: try handler.decode(entry)))
            } catch {
                return .undecodable(id: entry.id, error)
            }
        }
    }

    /// Hands entries to tasks of their own, a batch each (concurrency above one).
    private func dispatch(_ entries: [Reading], running: InFlight, into tasks: inout DiscardingTaskGroup) {
        let fresh = entries.filter { !running.contains($0.id) }
        for start in stride(from: 0, to: fresh.count, by: options.batchSize) {
            let batch = Array(fresh[start..<min(fresh.count, start + options.batchSize)])
            running.add(batch.map(\.id))
            tasks.addTask {
                await self.processLogging(batch)
                running.remove(batch.map(\.id))
            }
        }
    }

    /// `process`, its failure logged: the entries were not settled, they stay pending and are reclaimed.
    private func processLogging(_ batch: [Reading]) async {
        do {
            _ = try await process(batch, alsoLeased: [])
        } catch {
            logger.warning("settling failed", metadata: ["stream": "\(options.name)", "error": "\(error)"])
        }
    }

    /// What `process` came to: whether a failure keeps entries waiting for a dependency, and the entries the handler
    /// hands back for later (`StreamBatchResult.later`).
    struct Handled {
        var waits = false
        var later: [String: Duration] = [:]
    }

    /// Handles a batch's messages under their lease (and `alsoLeased`'s: entries this consumer keeps for later) and
    /// settles them; dead-letters the entries that did not decode.
    @discardableResult
    func process(_ batch: [Reading], alsoLeased: [String] = []) async throws -> Handled {
        var messages: [Delivered<Handler.Message>] = []
        var undecodable: [(id: String, error: StreamUndecodable)] = []
        messages.reserveCapacity(batch.count)
        for reading in batch {
            switch reading {
            case .message(let delivered): messages.append(delivered)
            case .undecodable(let id, let error): undecodable.append((id, error))
            }
        }
        var handled = Handled()
        if !messages.isEmpty {
            let started = ContinuousClock.now
            let messages = messages
            // Every entry of the batch is leased while its messages are handled: those that did not decode wait for
            // their dead letter below, and no other consumer may take them over meanwhile.
            let result = await whileLeased(batch.map(\.id) + alsoLeased) { await self.handler.handle(messages) }
            let failed = result.retry.compactMap { entry in entry.failure.map { (id: entry.id, recorded: $0.recorded) } }
            let refused = try await driver.settle(done: result.done, failed: failed, appends: result.appends)
            if refused > 0 {
                metrics.writesRefused?.increment(by: refused)
                logger.warning("redis refused bookkeeping writes", metadata: ["stream": "\(options.name)", "count": "\(refused)"])
            }
            for (id, failure) in result.deadLetter {
                try await deadLetter(id, deliveries: 1, error: failure.description)
            }
            await handler.settled(result, batch: messages, refusedWrites: refused, duration: ContinuousClock.now - started)
            handled.waits = result.waitsForDependency
            handled.later = result.later
        }
        // What does not decode never will: its dead letter keeps it for an operator (`roundupctl dlq`).
        for (id, error) in undecodable {
            try await deadLetter(id, deliveries: 1, error: error.description)
        }
        return handled
    }

    /// Takes over entries that sat pending with any consumer longer than the claim timeout (a consumer that died, or
    /// an entry whose processing failed), or dead-letters them after too many deliveries. Returns how many pending
    /// entries it looked at, and those it took over.
    func reclaimPage(limit: Int, running: InFlight) async throws -> (seen: Int, claimed: [Reading]) {
        let pending = try await driver.pending(idle: options.claimIdle, count: limit)
        var claim: [String] = []
        var exhausted: [StreamPendingEntry] = []
        for entry in pending where !running.contains(entry.id) {
            if let max = options.maxDeliveries, entry.deliveries >= max { exhausted.append(entry) } else { claim.append(entry.id) }
        }
        if !exhausted.isEmpty {
            // An entry that failed only because a dependency was unreachable is not at fault: it waits in the stream
            // for it to come back instead of going to the dead letters.
            let recorded = try await driver.recordedErrors(exhausted.map(\.id))
            for (index, entry) in exhausted.enumerated() {
                let text = index < recorded.count ? recorded[index] : nil
                let failure = text.flatMap(StreamFailure<Handler.Failure>.init(recorded:))
                if failure?.failure.keepsEntryWaiting == true {
                    claim.append(entry.id)
                    continue
                }
                do {
                    try await deadLetter(
                        entry.id, deliveries: entry.deliveries,
                        error: failure?.description ?? text ?? "delivered \(entry.deliveries) times without success")
                } catch {
                    // Redis refused the dead letter (at its maxmemory, most likely): the entry stays pending and is
                    // tried again next round; the reclaim of the others, and the draining, go on.
                    logger.warning(
                        "dead-lettering failed, will retry", metadata: ["stream": "\(options.name)", "entry": "\(entry.id)", "error": "\(error)"])
                }
            }
        }
        let claimed = try await driver.claim(claim, idle: options.claimIdle)
        if !claimed.isEmpty {
            metrics.reclaimed?.increment(by: claimed.count)
            logger.info("reclaimed pending entries", metadata: ["stream": "\(options.name)", "count": "\(claimed.count)"])
        }
        return (pending.count, decoded(claimed))
    }

    func deadLetter(_ id: String, deliveries: Int, error: String) async throws {
        let trimmed = try await driver.deadLetter(id, deliveries: deliveries, error: error)
        metrics.deadLettered?.increment()
        logger.error(
            "event dead-lettered",
            metadata: ["stream": "\(options.name)", "entry": "\(id)", "deliveries": "\(deliveries)", "error": "\(error.prefix(200))"])
        if trimmed > 0 {
            metrics.deadLettersTrimmed?.increment(by: trimmed)
            logger.warning("old dead letters trimmed", metadata: ["stream": "\(options.name)", "count": "\(trimmed)"])
        }
    }

    /// Runs `work` while keeping the entries claimed by this consumer: every `leaseEvery` their idle time is reset
    /// (which does not count a delivery), so work slower than the claim timeout (a slow Trello, rate-limit waits, a
    /// long sync job) is neither reclaimed by another consumer nor processed twice.
    func whileLeased<T: Sendable>(_ ids: [String], _ work: @escaping @Sendable () async -> T) async -> T {
        guard !ids.isEmpty else { return await work() }
        let every = options.leaseEvery
        return await withTaskGroup(of: Void.self) { group in
            group.addTask { [driver, logger, options] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: every)
                    guard !Task.isCancelled else { return }
                    do {
                        try await driver.extendLease(ids)
                    } catch {
                        logger.warning("batch lease heartbeat failed", metadata: ["stream": "\(options.name)", "error": "\(error)"])
                    }
                }
            }
            let value = await work()
            group.cancelAll()
            return value
        }
    }

    /// `roundup_stream_*{stream=…}` and the handler's own gauges.
    func recordGauges(inFlight: Int) async {
        await handler.recordGauges(inFlight: inFlight)
        guard !metrics.gauges.isEmpty, let stats = await driver.stats() else { return }
        let label = [("stream", options.name)]
        if metrics.gauges.contains(.length), let length = stats.length { Gauge(label: "roundup_stream_length", dimensions: label).record(length) }
        if let pending = stats.pending {
            if metrics.gauges.contains(.pending) { Gauge(label: "roundup_stream_pending", dimensions: label).record(pending) }
            if metrics.gauges.contains(.oldestPendingAge) {
                let age = stats.oldestPendingMilliseconds.map { max(0, Date().timeIntervalSince1970 - $0 / 1000) } ?? 0
                Gauge(label: "roundup_stream_oldest_pending_age_seconds", dimensions: label).record(age)
            }
        }
        if metrics.gauges.contains(.oldestWaitingAge) {
            // 0 when nothing waits, so an alert on it resolves.
            let age = stats.oldestWaitingMilliseconds.map { max(0, Date().timeIntervalSince1970 - $0 / 1000) } ?? 0
            Gauge(label: "roundup_stream_oldest_waiting_age_seconds", dimensions: label).record(age)
        }
        if metrics.gauges.contains(.deadLetters), let dead = stats.deadLetters { Gauge(label: "roundup_stream_dead_letters").record(dead) }
        if metrics.gauges.contains(.lag), let lag = stats.lag { Gauge(label: "roundup_stream_lag", dimensions: label).record(lag) }
    }
}

/// The entries (and batches) a consumer is handling in tasks of their own.
final class InFlight: Sendable {
    private let state = NIOLockedValueBox((ids: Set<String>(), batches: 0))
    var entries: Int { state.withLockedValue { $0.ids.count } }
    var batches: Int { state.withLockedValue { $0.batches } }
    func contains(_ id: String) -> Bool { state.withLockedValue { $0.ids.contains(id) } }
    func add(_ ids: [String]) {
        state.withLockedValue {
            $0.ids.formUnion(ids)
            $0.batches += 1
        }
    }
    func remove(_ ids: [String]) {
        state.withLockedValue {
            $0.ids.subtract(ids)
            $0.batches -= 1
        }
    }
    /// Entries kept by the consumer outside a batch (deferred): not reclaimed by it meanwhile.
    func hold(_ ids: [String]) { state.withLockedValue { $0.ids.formUnion(ids) } }
    func release(_ ids: [String]) { state.withLockedValue { $0.ids.subtract(ids) } }
}
