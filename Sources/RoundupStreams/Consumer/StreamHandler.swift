/// What a stream's consumer does with its entries: the one piece each stream (webhooks, jobs, pushes) writes itself.
///
/// The contract is typed, as swift-jobs' job types are: a handler names its `Message` and how an entry reads as one
/// (`decode`); the consumer decodes every entry it reads or takes over, dead-letters the ones that do not decode (at
/// once: they never will), and hands the handler only messages. No handler acknowledges an entry it could not read.
public protocol StreamHandler: Sendable {
    /// What an entry of the stream says, once read.
    associatedtype Message: Sendable
    associatedtype Failure: StreamFailureClass = UnclassifiedFailure

    /// Reads one entry. It depends on the entry alone: the consumer calls it for a batch it read ahead, on another task
    /// while the batch before is handled, so work done here (parsing a webhook's JSON) runs beside the store's round
    /// trips. An entry it refuses is dead-lettered with the refusal as its error.
    func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> Message

    /// Processes a batch (as many entries as the consumer's batch size, at most, the undecodable ones left out) and says
    /// what became of each entry. Runs under the entries' lease: no other consumer takes them over meanwhile, however
    /// long it takes.
    func handle(_ batch: [Delivered<Message>]) async -> StreamBatchResult<Failure>

    /// After a batch was settled: its metrics and logs. `refusedWrites` counts the bookkeeping writes (appends,
    /// recorded errors) Redis refused; `duration` runs from the start of `handle` to the end of the settling.
    func settled(_ result: StreamBatchResult<Failure>, batch: [Delivered<Message>], refusedWrites: Int, duration: Duration) async

    /// With the consumer's stream gauges (every reclaim round): the handler's own gauges.
    func recordGauges(inFlight: Int) async

    /// Entries of one key are handled in their order: while some of a key's entries wait to be handed back
    /// (`StreamBatchResult.later`), the key's later entries wait behind them. Nil: each entry on its own.
    func orderKey(_ message: Message) -> String?
}

extension StreamHandler {
    public func orderKey(_ message: Message) -> String? { nil }
    public func settled(_ result: StreamBatchResult<Failure>, batch: [Delivered<Message>], refusedWrites: Int, duration: Duration) async {}
    public func recordGauges(inFlight: Int) async {}
}

/// An entry read as its stream's message.
public struct Delivered<Message: Sendable>: Sendable {
    /// Its id on the stream.
    public var id: String
    public var message: Message

    public init(id: String, message: Message) {
        self.id = id
        self.message = message
    }
}

extension Delivered: Equatable where Message: Equatable {}

/// Why an entry can never be read as its stream's message. Recorded in its dead letter as `undecodable: <reason>`.
public struct StreamUndecodable: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String

    public init(_ reason: String) { self.reason = reason }

    public var description: String { "undecodable: \(reason)" }
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
    /// Entries of `retry` the consumer hands back to `handle` itself after the wait given (their account's Trello rate
    /// limit, say), instead of leaving them for a reclaim after the claim timeout: they stay pending with it, leased,
    /// and later entries of the same `orderKey` wait behind them. Only the consumer reading ahead (concurrency 1)
    /// does; others leave them to the reclaim.
    public var later: [String: Duration] = [:]
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
    public var waitsForDependency: Bool { retry.contains { $0.failure?.failure.backsOffConsumer == true } }
}
