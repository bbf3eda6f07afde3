/// What an activity row records: one decision the server made about an item (`GET /dailyroundup/activity`).
public enum ActivityKind: String, Sendable, Hashable, CaseIterable, Codable {
    /// A field changed on one side (`side`) and was carried to the other: `old_value` → `new_value`.
    case change
    /// An item appeared on one side and was carried to the other (a card sent to the apps, a reminder made a card).
    case create
    /// An item left one side (deleted, archived, moved out, no longer matching the filter) and went from the other.
    case delete
    /// An item moved between two synced lists of the account on one side and was moved on the other: `old_value` is
    /// the sync list it left, `new_value` the one it is in.
    case move
    /// Both sides changed a field: `rule` decided, `kept` says whose value stands, `old_value` is the one set aside.
    case conflict
    /// Trello told us of our own write: nothing changed, nothing was sent back.
    case echo
    /// The list's settings kept a change from flowing to the other side (a one-way list or field, a filtered card).
    case skipped
    /// A change could not be carried over: `message` says why.
    case error
    /// The user settled an open conflict or a possible duplicate.
    case resolved
}

/// The side of a sync: where a change was made, or whose value was kept.
public enum SyncSide: String, Sendable, Hashable, CaseIterable, Codable {
    case trello, reminders
}

/// What decided a conflict: the list's or account's policy, or one of the rules that come before it.
public enum ConflictRule: String, Sendable, Hashable, CaseIterable, Codable {
    case manual
    case lww
    case preferTrello = "prefer_trello"
    case preferReminders = "prefer_reminders"
    /// `completed` set on both sides within two seconds: done wins.
    case doneWins = "done_wins"
    /// The field does not flow to Reminders: the app's value is the only one there is.
    case oneWay = "one_way"

    public init(_ policy: ConflictPolicy) {
        switch policy {
        case .manual: self = .manual
        case .lww: self = .lww
        case .preferTrello: self = .preferTrello
        case .preferReminders: self = .preferReminders
        }
    }
}
