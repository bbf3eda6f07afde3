public import Foundation
public import RoundupCore
public import RoundupStore
public import RoundupStreams

/// Why an entry failed, as a value: it decides whether the entry waits for the store, is isolated from its batch, or
/// counts towards the dead letters. Derived from the thrown error's type and code, never from its text.
public enum EventFailure: String, Sendable, CaseIterable {
    /// The store could not be reached, timed out, was busy or restarting: not the event's fault. The entry waits in the
    /// stream for the store to come back and is never dead-lettered for it.
    case storeUnavailable = "store_unavailable"
    /// The store refused this event's data (`StoreFailure.data`: a NUL in text, a constraint, a value too large).
    /// Its batch is split until the entry fails alone; it counts towards the dead letters.
    case eventData = "event_data"
    /// The store refused the statement itself (`StoreFailure.statement`): a bug or a schema out of step. Counts.
    case storeRejected = "store_rejected"
    /// Trello answered 429 or 5xx, timed out or could not be reached. Counts.
    case trelloTransient = "trello_transient"
    /// Trello refused the request (4xx) or answered something that is not JSON, or the account has no credentials. Counts.
    case trelloRejected = "trello_rejected"
    /// The account's Trello token is over its rate limit for longer than a batch waits (`WebhookProcessor.trelloWait`):
    /// the entry waits in the stream while the rest of the batch settles. It never counts towards the dead letters, and
    /// the consumer does not back off for it.
    case trelloThrottled = "trello_throttled"
    /// An operator paused the entry's account (`roundupctl pause account`): it waits in its shard, pending, while the
    /// other accounts flow. It never counts towards the dead letters, and the consumer does not back off for it.
    case accountPaused = "account_paused"

    init(store error: any Error) {
        switch StoreFailure(error) {
        case .unavailable: self = .storeUnavailable
        case .data: self = .eventData
        case .statement: self = .storeRejected
        }
    }

    /// An unreachable store keeps every entry waiting; the consumer backs off.
    public var waitsForStore: Bool { self == .storeUnavailable }
}

/// An entry's failure: its class and what happened (recorded in `{prefix}stream:webhooks:errors` as the class, a tab,
/// the message).
public typealias EntryError = StreamFailure<EventFailure>

extension EventFailure: StreamFailureClass {
    /// An unreachable store and a throttled account keep an entry waiting instead of counting its deliveries towards
    /// the dead letters; only the store makes the consumer back off.
    public var keepsEntryWaiting: Bool { waitsForStore || self == .trelloThrottled || self == .accountPaused }
    public var backsOffConsumer: Bool { waitsForStore }
}

/// The outcome of a batch: which entries are done (ack them), which failed and why.
public struct BatchOutcome: Sendable {
    public var done: [String] = []
    /// Entries whose observations were applied to the store (a subset of `done`).
    public var applied: [String] = []
    /// Worth retrying: left pending, reclaimed later, dead-lettered after too many deliveries (unless the store was
    /// unavailable: `EventFailure.waitsForStore`).
    public var retry: [(id: String, error: EntryError)] = []
    public var dropped = 0
    public var changesWritten = 0
    /// Accounts whose apps have new changes: each gets a background push.
    public var accountsWithChanges = Set<String>()
    /// (account, board) whose labels changed: its synced lists are reconciled (`RedisKeys.reconcileRequests`).
    public var boardLabelChanges = Set<AccountScoped>()
    /// Action type of each entry, for metrics by type.
    public var types: [String: String] = [:]
    /// Entries left waiting for their account's Trello rate limit (`EventFailure.trelloThrottled`), and how long the
    /// token must wait: the consumer hands them back after that, in their account's order.
    public var throttled: [String: Duration] = [:]

    /// Adds what another part of the batch came to.
    mutating func merge(_ part: BatchOutcome) {
        done += part.done
        applied += part.applied
        retry += part.retry
        dropped += part.dropped
        changesWritten += part.changesWritten
        accountsWithChanges.formUnion(part.accountsWithChanges)
        boardLabelChanges.formUnion(part.boardLabelChanges)
        types.merge(part.types) { current, _ in current }
        throttled.merge(part.throttled) { current, _ in current }
    }
}

/// A webhook stream entry as the worker reads it (`WebhookProcessor.decode`): the webhook stream's message.
public struct WebhookReading: Sendable {
    public var account: String
    /// The Trello action's type (for the metrics by type).
    public var type: String
    public var actionID: String?
    public var date: Date
    public var events: [CardEvent]
    public var boardID: String?
    /// A board label changed (`TrelloActionType.boardLabelChanges`): the board, when its id is a Trello id.
    public var labelsChangedOnBoard: String? = nil
    /// Where the ingress enqueued it in a trace (tracing on): the batch's span links to it.
    public var trace: TraceHeaders? = nil
}

extension Delivered where Message == WebhookReading {
    var account: String { message.account }
    var type: String { message.type }
    var actionID: String? { message.actionID }
    var date: Date { message.date }
    var events: [CardEvent] { message.events }
    var boardID: String? { message.boardID }
    var labelsChangedOnBoard: String? { message.labelsChangedOnBoard }
}
