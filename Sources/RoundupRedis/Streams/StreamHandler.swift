/// What a stream's consumer does with its entries: the one piece each stream (webhooks, jobs, pushes) writes itself.
public protocol StreamHandler: Sendable {
    associatedtype Failure: StreamFailureClass = UnclassifiedFailure

    /// Processes a batch (as many entries as the consumer's batch size, at most) and says what became of each entry.
    /// Runs under the entries' lease: no other consumer takes them over meanwhile, however long it takes.
    func handle(_ batch: [StreamDelivery]) async -> StreamBatchResult<Failure>

    /// After a batch was settled: its metrics and logs. `refusedWrites` counts the bookkeeping writes (appends,
    /// recorded errors) Redis refused; `duration` runs from the start of `handle` to the end of the settling.
    func settled(_ result: StreamBatchResult<Failure>, batch: [StreamDelivery], refusedWrites: Int, duration: Duration) async

    /// With the consumer's stream gauges (every reclaim round): the handler's own gauges.
    func recordGauges(inFlight: Int) async

    /// A batch the consumer read ahead, while the batch before it is still being handled: work that depends on the
    /// entries alone (decoding them) can be done now, on another thread, for `handle` to take up. It may never be
    /// handled by this consumer (a pause, a shutdown, an error), so nothing may depend on it having run.
    func readAhead(_ batch: [StreamDelivery]) async
}

extension StreamHandler {
    public func readAhead(_ batch: [StreamDelivery]) async {}
    public func settled(_ result: StreamBatchResult<Failure>, batch: [StreamDelivery], refusedWrites: Int, duration: Duration) async {}
    public func recordGauges(inFlight: Int) async {}
}

/// What became of the entries of a batch.
public struct StreamBatchResult<Failure: StreamFailureClass>: Sendable {
    /// Acknowledged and deleted.
    public var done: [String] = []
    /// Left pending, to be reclaimed after the claim timeout. With a failure it is recorded, and the entry counts its
    /// deliveries towards the dead letters (unless its class keeps the entry waiting); without one nothing is
    /// recorded (a job interrupted by a shutdown).
    public var retry: [(id: String, failure: StreamFailure<Failure>?)] = []
    /// Will never succeed as it is: dead-lettered now.
    public var deadLetter: [(id: String, failure: StreamFailure<Failure>)] = []
    /// Entries to append to other streams with the settling (best effort).
    public var appends: [StreamAppend] = []
    /// Whatever the handler wants back in `settled` (its own counts).
    public var detail: (any Sendable)?

    public init(
        done: [String] = [], retry: [(id: String, failure: StreamFailure<Failure>?)] = [],
        deadLetter: [(id: String, failure: StreamFailure<Failure>)] = [], appends: [StreamAppend] = []
    ) {
        self.done = done
        self.retry = retry
        self.deadLetter = deadLetter
        self.appends = appends
    }

    /// Whether an entry failed because a dependency is down: the consumer backs off before it reads more.
    public var waitsForDependency: Bool { retry.contains { $0.failure?.failure.keepsEntryWaiting == true } }
}
