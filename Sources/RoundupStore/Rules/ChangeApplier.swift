package import Foundation
package import RoundupCore

/// The rows `ChangeApplier` reads and writes, keyed by (account, card). SQLite runs each call as a statement inside
/// its write transaction; PostgreSQL reads every row a batch needs up front and writes the result in a few statements.
package protocol ChangeRows {
    mutating func task(accountID: String, cardID: String) throws -> ChangeApplier<Self>.TaskRow?
    /// Changes stamps (and `deleted`, when given) of an existing task, and sets the card's `values` of the fields named
    /// over those stored (`FieldValues`).
    mutating func updateTask(
        accountID: String, cardID: String, stamps: [String: ChangeApplier<Self>.Stamp], values: [String: JSONValue], deleted: Bool?,
        actionID: String?, now: String) throws
    /// Creates the task, or puts an existing one (deleted, or in another list) back in `syncListID`; `values` as above.
    mutating func upsertTask(
        accountID: String, syncListID: String, cardID: String, stamps: [String: ChangeApplier<Self>.Stamp], values: [String: JSONValue],
        actionID: String?, now: String) throws
    /// The card's newest change the apps have not acknowledged.
    mutating func latestChange(accountID: String, cardID: String) throws -> ChangeApplier<Self>.ChangeRow?
    /// Marks the card's change `changeID` replaced (a newer one of the card is inserted next).
    mutating func supersede(changeID: Int64, accountID: String, cardID: String) throws
    mutating func insertChange(_ change: ChangeApplier<Self>.NewChange, now: String) throws
    /// The list's settings and pairing time as stored now (nil: the list is gone).
    mutating func listRules(syncListID: String) throws -> ChangeApplier<Self>.ListRules?
    mutating func insertActivity(accountID: String, _ activity: NewActivity, now: String) throws
}

/// Applies card observations inside one write transaction: compares field hashes with `sync_tasks`,
/// writes pending changes, merges a card's new change into its unacknowledged one, and records each decision in the
/// activity history.
package struct ChangeApplier<Rows: ChangeRows> {
    package var rows: Rows
    package private(set) var written = 0
    /// Accounts that got at least one change (their devices get a background push).
    package private(set) var accounts = Set<String>()
    /// Rows written by change type (after folding), for reconciliation's drift figures.
    package private(set) var types: [ChangeType: Int] = [:]
    private let now = Timestamp.now()
    /// Each list's rules, read once per transaction.
    private var rules: [String: ListRules] = [:]

    package init(rows: Rows) { self.rows = rows }

    package struct TaskRow {
        package var syncListID: String
        package var stamps: [String: Stamp]
        package var deleted: Bool
        /// The reminder the card maps to, once an app acknowledged its create.
        package var reminderID: String? = nil
        /// Whether the store has the card's values (`FieldValues`); a task written before they were kept has none
        /// until a full read of the card (a reconciliation) gives them.
        package var hasValues = true

        package init(syncListID: String, stamps: [String: Stamp], deleted: Bool, reminderID: String? = nil, hasValues: Bool = true) {
            self.syncListID = syncListID
            self.stamps = stamps
            self.deleted = deleted
            self.reminderID = reminderID
            self.hasValues = hasValues
        }
    }

    package struct ChangeRow {
        package var id: Int64
        package var type: ChangeType
        package var changedFields: [String]
        package var fields: [String: JSONValue]
        /// The device holding the change (`ChangeClaim`), and until when (milliseconds since 1970).
        package var claim: Hold? = nil
        /// The list a `move` left.
        package var fromSyncListID: String? = nil
    }

    /// A device's hold on a change: a change folded into a newer one passes it on, so the card stays with the device
    /// that may be applying it (another device would make a second reminder from the newer create).
    package struct Hold: Equatable {
        package var deviceID: String
        package var until: Int64
    }

    package struct NewChange {
        package var accountID: String
        package var syncListID: String
        package var type: ChangeType
        package var changedFieldsJSON: String
        package var fieldsJSON: String
        package var cardID: String
        package var actionID: String?
        package var changedFields: [String]
        package var fields: [String: JSONValue]
        /// The hold of the change it replaces, if any.
        package var claim: Hold? = nil
        /// The list a `move` left (stored with the move, which the store writes as an update: `ChangeType.storedName`).
        package var fromSyncListID: String? = nil
        /// A device not to hand the change to until then (`ChangeClaim`'s decline), when nobody holds it.
        package var declined: Hold? = nil

        /// The change as `latestChange` answers it, once written with `id`.
        package func row(id: Int64) -> ChangeRow {
            ChangeRow(id: id, type: type, changedFields: changedFields, fields: fields, claim: claim, fromSyncListID: fromSyncListID)
        }
    }

    /// What a list's settings decide here: which fields reach the apps, and which cards become reminders.
    package struct ListRules {
        package var settings: SyncSettings
        package var pairedAt: Date?
    }

    package mutating func rules(_ syncListID: String) throws -> ListRules {
        if let known = rules[syncListID] { return known }
        let found = try rows.listRules(syncListID: syncListID) ?? ListRules(settings: .default, pairedAt: nil)
        rules[syncListID] = found
        return found
    }

    /// Whether a card first seen in a list (new, moved in, back from the archive, matching its filter again) may become
    /// a reminder: the list's direction and initial mode decide, and a card a reminder already owns always may.
    package mutating func admitsNewCard(syncListID: String, cardID: String, task: TaskRow?) throws -> Bool {
        let rules = try rules(syncListID)
        return rules.settings.admitsNewCard(cardID: cardID, mapped: task?.reminderID != nil, pairedAt: rules.pairedAt)
    }

    package typealias Stamp = FieldStamps.Stamp
    package static var membership: String { FieldStamps.membership }
    package static func encode(_ stamps: [String: Stamp]) -> String { FieldStamps.encode(stamps) }

    /// Writes a row of the activity history, in this transaction.
    package mutating func note(_ accountID: String, _ activity: NewActivity) throws {
        try rows.insertActivity(accountID: accountID, activity, now: now)
    }

    /// What Trello's side of `o` did, for the history: one row, or one per field of an edit.
    private mutating func noteTrello(
        _ o: CardObservation, _ kind: ActivityKind, reminderID: String?, field: String? = nil, old: JSONValue? = nil, new: JSONValue? = nil,
        message: String? = nil
    ) throws {
        try note(
            o.accountID,
            NewActivity(
                kind: kind, syncListID: o.syncListID, cardID: o.cardID, reminderID: reminderID, side: .trello, field: field, oldValue: old,
                newValue: new, message: message, trelloActionID: o.actionID))
    }

    package mutating func apply(_ o: CardObservation) throws {
        let task = try rows.task(accountID: o.accountID, cardID: o.cardID)
        let time = o.actionDate.timeIntervalSince1970

        switch o.kind {
        case .echo(let fields):
            // Nothing changes; the history says why nothing was sent (only of a card the store still has there).
            guard let task, task.syncListID == o.syncListID else { return }
            if fields.isEmpty {
                try noteTrello(o, .echo, reminderID: task.reminderID, message: "the card's removal in Trello was our own")
            }
            for (field, value) in fields.sorted(by: { $0.key < $1.key }) {
                try noteTrello(o, .echo, reminderID: task.reminderID, field: field, new: value, message: "Trello reported our own write")
            }

        case .removed:
            guard let task, !task.deleted, task.syncListID == o.syncListID else { return }
            // Delivered late: the card was seen in the list after this action (moved back, edited), so it stays.
            if let latest = task.stamps.values.map(\.time).max(), latest > time { return }
            var stamps = task.stamps
            stamps[Self.membership] = Stamp(hash: "removed", time: time)
            try rows.updateTask(accountID: o.accountID, cardID: o.cardID, stamps: stamps, values: [:], deleted: true, actionID: o.actionID, now: now)
            if try writeChange(o, type: .delete, changed: [], fields: [:]) {
                try noteTrello(o, .delete, reminderID: task.reminderID)
            } else {
                let direction = try rules(o.syncListID).settings.direction
                try noteTrello(
                    o, .skipped, reminderID: task.reminderID,
                    message: "the card left the list in Trello; the list syncs \(direction.rawValue), so its reminder stays")
            }

        case .fields(let fields, let full):
            if let task, !task.deleted, task.syncListID == o.syncListID {
                var stamps = task.stamps
                var changed: [String: JSONValue] = [:]
                // The values this action may set (for a task whose values the store lacks: `TaskRow.hasValues`).
                var current: [String: JSONValue] = [:]
                for (name, value) in fields {
                    let hash = value.fieldHash
                    if let stamp = stamps[name], stamp.time > time { continue }  // an older action than the one that set this field
                    if !task.hasValues { current[name] = value }
                    if stamps[name]?.hash == hash {
                        stamps[name] = Stamp(hash: hash, time: time)
                        continue
                    }
                    stamps[name] = Stamp(hash: hash, time: time)
                    changed[name] = value
                    // A date set in Trello to another instant than the all-day one we wrote: a timed date from now on.
                    if let field = SyncField(rawValue: name), field == .dueDate || field == .startDate,
                        let mark = stamps[FieldStamps.dayDateKey(field)], !mark.hash.hasSuffix(" " + (value.stringValue ?? "\u{0}"))
                    {
                        stamps.removeValue(forKey: FieldStamps.dayDateKey(field))
                    }
                    // A Trello edit: what our own write once sent back for the field is no longer the apps' own value.
                    if stamps.count > 1, !name.hasPrefix("_") { stamps.removeValue(forKey: SyncWrite.toldStamp(name)) }
                }
                // The card's values as now known: the changed ones; all of a full read when the store has none yet.
                let values = full && !task.hasValues ? current : changed
                guard !changed.isEmpty else {
                    // Nothing for the apps, but a value the store has may now be dated later: a value read from the
                    // card is dated with the (older) action that made us read it, and this action confirms it at its
                    // own time. That time is kept, or an older edit delivered after this one would count as newer.
                    if stamps != task.stamps || !values.isEmpty {
                        try rows.updateTask(
                            accountID: o.accountID, cardID: o.cardID, stamps: stamps, values: values, deleted: nil, actionID: o.actionID, now: now)
                    }
                    return
                }
                try rows.updateTask(
                    accountID: o.accountID, cardID: o.cardID, stamps: stamps, values: values, deleted: nil, actionID: o.actionID, now: now)
                let type: ChangeType = changed.count == 1 && changed[.completed] == .bool(true) ? .complete : .update
                try writeChange(o, type: type, changed: changed.keys.sorted(), fields: changed, stamps: stamps)
                let settings = try rules(o.syncListID).settings
                for (field, value) in changed.sorted(by: { $0.key < $1.key }) {
                    if settings.syncsToReminders(named: field) {
                        try noteTrello(o, .change, reminderID: task.reminderID, field: field, old: o.previous[field], new: value)
                    } else {
                        try noteTrello(
                            o, .skipped, reminderID: task.reminderID, field: field, old: o.previous[field], new: value,
                            message: "the list's settings keep \(field) from Reminders")
                    }
                }
            } else {
                // First sight of the card in this list (new, moved in, or back from the archive) — unless this action
                // is older than the card's removal, delivered late.
                if let task, task.deleted, let removed = task.stamps[Self.membership], removed.time > time { return }
                // A card the list's settings keep out (a one-way list, a pairing that takes no existing card) gets no row;
                // if it came from another synced list, it left that one.
                guard try admitsNewCard(syncListID: o.syncListID, cardID: o.cardID, task: task) else {
                    if let task, !task.deleted, task.syncListID != o.syncListID {
                        var left = o
                        left.syncListID = task.syncListID
                        left.kind = .removed
                        try apply(left)
                    }
                    return
                }
                // A move: the card's reminder is in another synced list of the account (the card is live there, or left
                // it a moment ago and its delete has not reached the apps). The apps move that reminder.
                var from: String?
                if full, let task, task.reminderID != nil, task.syncListID != o.syncListID,
                    try !task.deleted || rows.latestChange(accountID: o.accountID, cardID: o.cardID)?.type == .delete
                {
                    from = task.syncListID
                }
                var stamps = fields.mapValues { Stamp(hash: $0.fieldHash, time: time) }
                stamps[Self.membership] = Stamp(hash: "present", time: time)
                // The all-day dates we wrote stay known: a card back with the same instant is still all-day.
                for (key, mark) in task?.stamps ?? [:] where FieldStamps.isDayDateKey(key) { stamps[key] = mark }
                try rows.upsertTask(
                    accountID: o.accountID, syncListID: o.syncListID, cardID: o.cardID, stamps: stamps, values: fields, actionID: o.actionID, now: now
                )
                if let from {
                    // Every field goes with the move; `changed_fields` names those Trello changed beside it (an edit
                    // the apps then make to another field is no conflict with the move).
                    let moved = fields.filter { task?.stamps[$0.key]?.hash != $0.value.fieldHash }.keys.sorted()
                    try writeChange(o, type: .move, changed: moved, fields: fields, stamps: stamps, from: from)
                    try noteTrello(
                        o, .move, reminderID: task?.reminderID, old: .string(from), new: .string(o.syncListID), message: "the card moved in Trello")
                    return
                }
                try writeChange(o, type: full ? .create : .update, changed: fields.keys.sorted(), fields: fields, stamps: stamps)
                let settings = try rules(o.syncListID).settings
                try noteTrello(
                    o, .create, reminderID: task?.reminderID, new: .object(fields.filter { settings.syncsToReminders(named: $0.key) }),
                    message: task?.deleted == true ? "the card is back in the list" : nil)
            }
        }
    }

    /// Writes a change; an unacknowledged change of the same card is folded into it (one row, a new id). Every change
    /// for the apps passes here, so here the list's settings keep out what does not flow to Reminders: a field that
    /// does not sync that way, and a delete of a list that does not. Returns whether a change was written.
    /// `stamps`, the card's stamps as they now are: a due or start date still at the instant we wrote for an all-day
    /// date (`FieldStamps.dayDateKey`) goes to the apps as that day. `declined`: a device the change is not handed to
    /// for a while (it learned the values otherwise), unless the change it replaces is held.
    @discardableResult
    package mutating func writeChange(
        _ o: CardObservation, type: ChangeType, changed: [String], fields: [String: JSONValue], stamps: [String: Stamp]? = nil, from: String? = nil,
        declined: Hold? = nil
    ) throws -> Bool {
        let settings = try rules(o.syncListID).settings
        var type = type
        var fields = fields.filter { settings.syncsToReminders(named: $0.key) }
        if let stamps { FieldStamps.giveDays(&fields, stamps: stamps) }
        var changed = changed.filter { settings.syncsToReminders(named: $0) }
        var from = from
        switch type {
        case .delete:
            guard settings.direction.toReminders else { return false }
        case .create, .move:
            break
        case .update, .complete:
            guard !changed.isEmpty else { return false }
            type = changed == [SyncField.completed.rawValue] && fields[.completed] == .bool(true) ? .complete : .update
        }
        var claim: Hold?
        if let previous = try rows.latestChange(accountID: o.accountID, cardID: o.cardID) {
            claim = previous.claim
            let previousType = previous.type
            let previousChanged = previous.changedFields
            let previousFields = previous.fields
            try rows.supersede(changeID: previous.id, accountID: o.accountID, cardID: o.cardID)
            switch (previousType, type) {
            case (_, .delete), (_, .create):
                // The newer state replaces the older one whole. A create followed by a delete still sends the delete:
                // an app may have applied the create without acking it yet, and a delete of an unknown reminder is harmless.
                break
            case (.create, _):
                // The apps have not made the reminder yet: they make it where the card is now.
                type = .create
                fields = previousFields.merging(fields) { _, new in new }
                changed = Array(Set(previousChanged).union(changed)).sorted()
                from = nil
            case (.delete, .move):
                break  // the card left its list and arrived in another: one move
            case (.delete, _):
                break  // cannot happen: a deleted card's task is re-created with a create
            case (.move, _), (_, .move):
                // A move and an edit, in either order, are one move from the list the apps have the reminder in; a card
                // moved back there before they applied the move is an update.
                fields = previousFields.merging(fields) { _, new in new }
                changed = Array(Set(previousChanged).union(changed)).sorted()
                from = previous.fromSyncListID ?? from
                type = from == o.syncListID ? .update : .move
                if type == .update { from = nil }
            default:
                fields = previousFields.merging(fields) { _, new in new }
                changed = Array(Set(previousChanged).union(changed)).sorted()
                type = changed == [SyncField.completed.rawValue] && fields[.completed] == .bool(true) ? .complete : .update
            }
        }
        try rows.insertChange(
            NewChange(
                accountID: o.accountID, syncListID: o.syncListID, type: type,
                changedFieldsJSON: JSONValue.array(changed.map(JSONValue.string)).canonicalJSON,
                fieldsJSON: JSONValue.object(fields).canonicalJSON, cardID: o.cardID, actionID: o.actionID,
                changedFields: changed, fields: fields, claim: claim, fromSyncListID: type == .move ? from : nil,
                declined: claim == nil ? declined : nil),
            now: now)
        written += 1
        accounts.insert(o.accountID)
        types[type, default: 0] += 1
        return true
    }
}

/// How `pending_changes.changed_fields` and `.fields` are stored: canonical JSON text.
package enum PendingChangeCoding {
    package static func changedFields(_ text: String) -> [String] {
        (try? JSONParser.parse(Array(text.utf8)))?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    package static func fields(_ text: String) -> [String: JSONValue] {
        (try? JSONParser.parse(Array(text.utf8)))?.objectValue ?? [:]
    }
}

/// `sync_tasks.field_hashes`, the same on both back ends.
package enum FieldStamps {
    /// A field's hash and the time (seconds since 1970) of the action that set it.
    package typealias Stamp = FieldStamp

    /// The stamp that records when the card last entered or left the list.
    package static let membership = "_membership"

    /// The stamp that remembers an all-day date the server wrote for `field` (due or start): its hash is
    /// `<YYYY-MM-DD> <the instant written>`, its time when it was written. Another instant there (a time set in Trello)
    /// makes the date a timed one again.
    package static func dayDateKey(_ field: SyncField) -> String { "_day_" + field.rawValue }
    package static func isDayDateKey(_ key: String) -> Bool { key.hasPrefix("_day_") }

    package static func dayDateStamp(day: DayDate, instant: String, time: Double) -> Stamp {
        Stamp(hash: "\(day) \(instant)", time: time)
    }

    /// Replaces each due or start date of `fields` that is still the instant written for an all-day date by its day.
    package static func giveDays(_ fields: inout [String: JSONValue], stamps: [String: Stamp]) {
        for field in [SyncField.dueDate, .startDate] {
            guard case .string(let instant)? = fields[field.rawValue], let mark = stamps[dayDateKey(field)] else { continue }
            let parts = mark.hash.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, parts[1] == instant else { continue }
            fields[field.rawValue] = .string(String(parts[0]))
        }
    }

    /// `value` of a due or start date as the card holds it: the day of an all-day date whose mark names that day
    /// becomes the instant written for it (the inverse of `giveDays`); any other value is as it is.
    package static func takeDay(_ field: SyncField, _ value: JSONValue, stamps: [String: Stamp]) -> JSONValue {
        guard field == .dueDate || field == .startDate, case .string(let text) = value, let mark = stamps[dayDateKey(field)] else { return value }
        let parts = mark.hash.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0] == text else { return value }
        return .string(String(parts[1]))
    }

    /// `sync_tasks.field_hashes`: `{"title":["<hash>",<time>],…}`, the canonical JSON of that object (keys sorted), written
    /// directly: every event reads and rewrites its card's stamps, and building a `JSONValue` for them was a
    /// measurable share of the worker's instructions.
    package static func encode(_ stamps: [String: Stamp]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(stamps.count * 64 + 2)
        out.append(UInt8(ascii: "{"))
        for (index, (name, stamp)) in stamps.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONValue.writeCanonical(string: name, into: &out)
            out.append(contentsOf: ":[".utf8)
            JSONValue.writeCanonical(string: stamp.hash, into: &out)
            out.append(UInt8(ascii: ","))
            JSONValue.writeCanonical(number: stamp.time, into: &out)
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// The stamps `encode` wrote. The shape it writes (no spaces, no escapes) is read by a scanner of its own; anything
    /// else (text written another way, by hand or by an older version) goes through the JSON parser, as it all did
    /// before (the parser built a `JSONValue` tree per task). Members that are not
    /// a [hash, time] pair are skipped either way.
    package static func decodeStamps(_ text: String) -> [String: Stamp] {
        var text = text
        if let stamps = text.withUTF8({ scanStamps($0) }) { return stamps }
        guard case .object(let object)? = try? JSONParser.parse(Array(text.utf8)) else { return [:] }
        var stamps: [String: Stamp] = [:]
        for (name, value) in object {
            guard let pair = value.arrayValue, pair.count == 2, let hash = pair[0].stringValue, case .number(let time) = pair[1] else { continue }
            stamps[name] = Stamp(hash: hash, time: time)
        }
        return stamps
    }

    /// `{"name":["hash",time],…}` exactly as `encode` writes it, or nil for anything else.
    private static func scanStamps(_ bytes: UnsafeBufferPointer<UInt8>) -> [String: Stamp]? {
        var i = 0
        func take(_ byte: UInt8) -> Bool {
            guard i < bytes.count, bytes[i] == byte else { return false }
            i += 1
            return true
        }
        // A string without escapes or control characters (the scanner leaves those to the parser).
        func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = i
            while i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
                guard bytes[i] != UInt8(ascii: "\\"), bytes[i] >= 0x20 else { return nil }
                i += 1
            }
            guard i < bytes.count else { return nil }
            let value = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
            i += 1
            return value
        }
        func number() -> Double? {
            let start = i
            // At most 15 digits, at most 3 after the point (a time to the millisecond, as `encode` writes stamps): the
            // integer they make is exact, and dividing it by a power of ten rounds once, to the Double nearest the
            // decimal, which is what Double(_:) reads (without its string and strtod).
            var negative = false
            var digits = 0
            var fractionDigits = -1
            var integer: Int64 = 0
            if i < bytes.count, bytes[i] == UInt8(ascii: "-") {
                negative = true
                i += 1
            }
            while i < bytes.count {
                let byte = bytes[i]
                if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 15 {
                    integer = integer * 10 + Int64(byte - UInt8(ascii: "0"))
                    digits += 1
                    if fractionDigits >= 0 { fractionDigits += 1 }
                } else if byte == UInt8(ascii: "."), fractionDigits < 0 {
                    fractionDigits = 0
                } else {
                    break
                }
                i += 1
            }
            if digits > 0, fractionDigits != 0, fractionDigits <= 3, i < bytes.count, bytes[i] == UInt8(ascii: "]") {
                let scale: Double = fractionDigits == 3 ? 1000 : fractionDigits == 2 ? 100 : fractionDigits == 1 ? 10 : 1
                let value = Double(integer) / scale
                return negative ? -value : value
            }
            i = start
            while i < bytes.count, bytes[i] != UInt8(ascii: "]") { i += 1 }
            guard i > start else { return nil }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
            // Only JSON's number grammar: Double(_:) alone would also take "nan", "inf" and hex floats.
            guard text.utf8.allSatisfy({ ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || "-+.eE".utf8.contains($0) }) else { return nil }
            return Double(text)
        }
        var stamps: [String: Stamp] = [:]
        stamps.reserveCapacity(24)  // every field, the membership and a few marks: no growing on the way
        guard take(UInt8(ascii: "{")) else { return nil }
        if take(UInt8(ascii: "}")) { return i == bytes.count ? stamps : nil }
        repeat {
            guard let name = string(), take(UInt8(ascii: ":")), take(UInt8(ascii: "[")), let hash = string(), take(UInt8(ascii: ",")),
                let time = number(), take(UInt8(ascii: "]"))
            else { return nil }
            stamps[name] = Stamp(hash: hash, time: time)
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "}")), i == bytes.count else { return nil }
        return stamps
    }
}
