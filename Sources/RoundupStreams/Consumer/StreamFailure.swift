/// A typed reason an entry failed. Its raw value is what is recorded (the errors hash, the dead letter).
public protocol StreamFailureClass: RawRepresentable, Sendable, Hashable where RawValue == String {
    /// Whether an entry that failed for this reason waits in the stream instead of counting its deliveries towards
    /// the dead letters (a dependency was down, not the entry at fault); the consumer also backs off.
    var keepsEntryWaiting: Bool { get }
    /// Whether the consumer backs off before it reads more after an entry failed for this reason (a dependency every
    /// entry needs is down). By default, whenever the entry is kept waiting; a reason of one entry's own (its account
    /// throttled) keeps it waiting while the others go on.
    var backsOffConsumer: Bool { get }
}

extension StreamFailureClass {
    public var backsOffConsumer: Bool { keepsEntryWaiting }
}

/// For streams whose handler never classifies a failure (an entry is only left pending, nothing is recorded).
public enum UnclassifiedFailure: String, StreamFailureClass {
    case failed
    public var keepsEntryWaiting: Bool { false }
}

/// An entry's failure: its class and what happened.
public struct StreamFailure<Class: StreamFailureClass>: Error, Sendable, Equatable, CustomStringConvertible {
    public var failure: Class
    public var message: String

    public init(_ failure: Class, _ message: String) {
        self.failure = failure
        self.message = message
    }

    public var description: String { "\(failure.rawValue): \(message)" }

    /// As an entry's last error is recorded in the stream's errors hash: the class, a tab, the message (its first
    /// 500 characters).
    public var recorded: String { failure.rawValue + "\t" + String(message.prefix(500)) }

    /// Reads `recorded` back; nil for anything else (nothing recorded, or a value in another form).
    public init?(recorded: String) {
        guard let tab = recorded.firstIndex(of: "\t"), let failure = Class(rawValue: String(recorded[..<tab])) else { return nil }
        self.init(failure, String(recorded[recorded.index(after: tab)...]))
    }
}
