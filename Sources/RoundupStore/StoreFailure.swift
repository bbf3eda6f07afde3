/// Why a store operation failed, from the error's type and code (never its text): the worker retries an outage,
/// isolates an entry whose data the store refuses, and counts a refused statement towards the dead letters.
public enum StoreFailure: Sendable, Equatable {
    /// Not reached, timed out, busy, restarting, out of resources: no fault of what was written.
    case unavailable
    /// The store refused the values: PostgreSQL SQLSTATE classes 22 (data exception, e.g. 22021 for a NUL in text),
    /// 23 (integrity constraint), 27 (triggered data change), 54 (program limit, e.g. an index row too large) and P0
    /// (raised by a trigger); SQLite's constraint (a trigger's `RAISE(ABORT, …)` included), type mismatch, too big
    /// and range errors.
    case data
    /// The store refused the statement itself: PostgreSQL class 42 (syntax or access rule), SQLite's generic error
    /// (no such table or column). A bug or a schema out of step with the code, the same for every value.
    case statement

    /// Each backend classifies its own errors (`StoreClassifiedError`, at its edge); anything else — no answer, a lost
    /// connection, a timeout, a cancellation — is an outage.
    public init(_ error: any Error) {
        self = (error as? any StoreClassifiedError)?.storeFailure ?? .unavailable
    }
}

/// An error a backend knows the kind of, by its code.
public protocol StoreClassifiedError: Error {
    var storeFailure: StoreFailure { get }
}
