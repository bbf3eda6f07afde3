package import RoundupCore

/// A pending change as acknowledgement needs it.
package struct AckedChange: Sendable, Equatable {
    package var accountID: String
    package var cardID: String
    package var type: ChangeType
    package var superseded: Bool
}

/// The rows `Acknowledgement` reads and writes. SQLite answers each call with a statement inside its write
/// transaction; PostgreSQL reads the changes up front and writes afterwards, in the transaction that read them.
package protocol AckRows {
    /// The highest change id ever issued: a larger id, or one below 1, was never given to an app.
    mutating func highestIssuedChangeID() throws -> Int64
    mutating func change(id: Int64) throws -> AckedChange?
    /// Records the reminder the app made (or updated) for the card.
    mutating func mapReminder(accountID: String, cardID: String, reminderID: String, now: String) throws
    /// The card's newer live creates become updates: the app already made the reminder from an older one.
    mutating func turnCreatesIntoUpdates(accountID: String, cardID: String, after id: Int64) throws
    /// Deletes the change and the older changes of its card that were folded into it.
    mutating func deleteChange(accountID: String, id: Int64, cardID: String) throws
    /// Settles (as `merged`) an open possible duplicate of this reminder and this card that no resolution is under way
    /// for: the app took the reminder for the card, so the two are one and the person has nothing left to choose.
    mutating func settleDuplicates(accountID: String, cardID: String, reminderID: String, now: String) throws
}

/// The rule of `POST /dailyroundup/changes/ack`, once for both stores: all or nothing; an id of another account, or
/// never issued, acks nothing; an id acked (or folded away) before is acked again harmlessly; a create, update or
/// complete acked with a reminder id maps the card to that reminder (and settles an open possible duplicate of the two);
/// a create acked after it was folded into a newer change turns that newer create into an update, so the app does not
/// make a second reminder.
package enum Acknowledgement {
    package static func run<Rows: AckRows>(accountID: String, acks: [ChangeAck], rows: inout Rows, now: String = Timestamp.now()) throws -> AckResult
    {
        guard !acks.isEmpty else { return .acked([]) }
        let highest = try rows.highestIssuedChangeID()
        var found: [Int64: AckedChange] = [:]
        for ack in acks {
            if let change = try rows.change(id: ack.id) {
                guard change.accountID == accountID else { return .notFound(ack.id) }
                found[ack.id] = change
            } else if ack.id <= 0 || ack.id > highest {
                return .notFound(ack.id)
            }
        }
        for ack in acks {
            guard let change = found[ack.id] else { continue }
            if let reminder = ack.reminderID, change.type != .delete {
                try rows.mapReminder(accountID: accountID, cardID: change.cardID, reminderID: reminder, now: now)
                try rows.settleDuplicates(accountID: accountID, cardID: change.cardID, reminderID: reminder, now: now)
                if change.superseded, change.type == .create {
                    try rows.turnCreatesIntoUpdates(accountID: accountID, cardID: change.cardID, after: ack.id)
                }
            }
            try rows.deleteChange(accountID: accountID, id: ack.id, cardID: change.cardID)
        }
        return .acked(acks.map(\.id))
    }
}
