public import RoundupCore

/// A push roundup-pusher sends to an account's devices (all but the one whose sync caused it), on the push stream.
public struct PushRequest: StreamMessage, Equatable {
    public enum Field: String, CaseIterable, Sendable {
        case account, kind, reason
        case conflictIDs = "conflict_ids"
        case excludeDevice = "exclude_device"
    }

    public enum Kind: String, Sendable, CaseIterable {
        /// A silent push: the app syncs (coalesced per device).
        case background
        /// A banner: a conflict to resolve, or a Trello token to renew.
        case alert
    }

    public enum Reason: String, Sendable, CaseIterable {
        /// New changes from Trello (the worker).
        case changes
        /// Changes from another device's sync, import or a reconciliation.
        case sync, `import`, reconcile
        /// A sync conflict to resolve.
        case conflict
        /// Trello refused the account's token.
        case trelloTokenRevoked = "trello_token_revoked"
        /// A synced list was renamed, archived or restored in Trello: the apps read their lists again.
        case listChanged = "list_changed"
    }

    /// The approximate bound writers keep the push stream to (`MAXLEN ~`).
    public static let streamMaxLength = 100_000

    public var account: String
    public var kind: Kind
    public var reason: Reason
    public var conflictIDs: [Int64]
    public var excludeDevice: String?
    /// Where the changes it tells of were made, in a trace (tracing on): the pusher's span links to it.
    public var trace: TraceHeaders?

    public init(
        account: String, kind: Kind, reason: Reason, conflictIDs: [Int64] = [], excludeDevice: String? = nil, trace: TraceHeaders? = nil
    ) {
        self.account = account
        self.kind = kind
        self.reason = reason
        self.conflictIDs = conflictIDs
        self.excludeDevice = excludeDevice
        self.trace = trace
    }

    public static func background(account: String, reason: Reason, excludeDevice: String? = nil, trace: TraceHeaders? = nil) -> PushRequest {
        PushRequest(account: account, kind: .background, reason: reason, excludeDevice: excludeDevice, trace: trace)
    }

    /// An unknown kind reads as a background push; an unknown reason as `conflict` for an alert, `changes` otherwise.
    public init?(fields: [String: [UInt8]]) {
        guard let account = fields.text(Field.account) else { return nil }
        let kind = fields.text(Field.kind).flatMap(Kind.init(rawValue:)) ?? .background
        self.init(
            account: account, kind: kind,
            reason: fields.text(Field.reason).flatMap(Reason.init(rawValue:)) ?? (kind == .alert ? .conflict : .changes),
            conflictIDs: (fields.text(Field.conflictIDs) ?? "").split(separator: ",").compactMap { Int64($0) },
            excludeDevice: fields.text(Field.excludeDevice), trace: TraceHeaders(fields: fields))
    }

    public var fields: [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        fields.append(Field.account, account)
        fields.append(Field.kind, kind.rawValue)
        fields.append(Field.reason, reason.rawValue)
        if !conflictIDs.isEmpty { fields.append(Field.conflictIDs, conflictIDs.map(String.init).joined(separator: ",")) }
        if let excludeDevice { fields.append(Field.excludeDevice, excludeDevice) }
        trace?.append(to: &fields)
        return fields
    }

    public static func == (a: PushRequest, b: PushRequest) -> Bool {
        a.account == b.account && a.kind == b.kind && a.reason == b.reason && a.conflictIDs == b.conflictIDs && a.excludeDevice == b.excludeDevice
            && a.trace == b.trace
    }
}
