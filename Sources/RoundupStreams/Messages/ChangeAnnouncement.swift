public import RoundupCore

/// Tells every `roundup-api` process that an account has new pending changes, so its open change streams read the
/// store now rather than at their next heartbeat. It carries no change: the store stays the source of truth, and a
/// lost announcement only delays a stream until that heartbeat.
public struct ChangeAnnouncement: StreamMessage, Equatable {
    public enum Field: String, CaseIterable, Sendable {
        case account
    }

    /// The approximate bound writers keep the announcement stream to (`MAXLEN ~`): readers only follow its end, so a
    /// few seconds' worth is all it needs.
    public static let streamMaxLength = 10_000

    public var account: String
    /// Where the changes were made, in a trace (tracing on): the change streams' wake-up links to it.
    public var trace: TraceHeaders?

    public init(account: String, trace: TraceHeaders? = nil) {
        self.account = account
        self.trace = trace
    }

    public init?(fields: [String: [UInt8]]) {
        guard let account = fields.text(Field.account), !account.isEmpty else { return nil }
        self.init(account: account, trace: TraceHeaders(fields: fields))
    }

    public var fields: [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        fields.append(Field.account, account)
        trace?.append(to: &fields)
        return fields
    }
}
