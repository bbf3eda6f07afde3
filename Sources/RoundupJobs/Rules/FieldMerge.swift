import RoundupCore
import RoundupStore

/// How an app's edit of a card meets the card Trello holds, field by field: the conflict policy. Synchronous and
/// without I/O: `SyncEngine.update` reads the card, the store's stamps and the change waiting for the apps, asks
/// `plan()`, and writes what it answers (`FieldMergeTests` runs it table by table without Trello or a database).
///
/// A field Trello changed since the last sync (its stamp no longer hashes to the card's value, or a change of it still
/// waits for the apps) is a conflict: within two seconds done wins for `completed`; a field that never reaches the
/// apps keeps the app's value; otherwise the list's (or the account's) policy decides, and `manual` keeps Trello's
/// value while the user chooses.
struct FieldMerge {
    /// The fields the app changed that flow to Trello.
    var changed: [SyncField]
    /// The app's values (an all-day date as the instant written for its day).
    var app: [String: JSONValue]
    /// The card's values as Trello holds them now.
    var trello: [String: JSONValue]
    /// The card's stamps in the store (`sync_tasks.field_hashes`), empty for a card it has none of.
    var stamps: [String: FieldStamp]
    /// The card's change still waiting for the apps, if any.
    var pending: PendingChange?
    /// Fields an earlier attempt of this item began writing: the card's value is partly ours.
    var begun: Set<SyncField> = []
    /// The app's all-day dates as days (`SyncEngine.DayDates.days`): what a manual conflict shows.
    var days: [String: JSONValue] = [:]
    var settings: SyncSettings
    /// The account's default policy, for a field the list does not set one for.
    var accountPolicy: ConflictPolicy
    /// When the app made its edit, and when Trello's card last changed (seconds since 1970).
    var appTime: Double
    var cardTime: Double
    /// Whose activity rows these are.
    var origin: Origin

    struct Origin {
        var syncListID: String
        var cardID: String
        var reminderID: String
        var jobID: String?
    }

    /// What to do.
    struct Plan: Equatable {
        /// The app's values to write to Trello.
        var write: [String: JSONValue] = [:]
        /// Values that stand over a change waiting for the apps (rewritten into it with this write).
        var winning: [String: JSONValue] = [:]
        /// Trello's values the apps must be sent (Trello kept them).
        var toApps: [String: JSONValue] = [:]
        /// Values both sides hold already whose stamp says otherwise: stamped as agreed.
        var agreed: [String: JSONValue] = [:]
        var conflicts: [NewConflict] = []
        var activity: [NewActivity] = []
        /// Fields the card ends up holding the app's value of.
        var holds: Set<String> = []
    }

    func plan() -> Plan {
        var plan = Plan()
        for field in changed.sorted(by: { $0.rawValue < $1.rawValue }) {
            merge(field, into: &plan)
        }
        return plan
    }

    private func merge(_ field: SyncField, into plan: inout Plan) {
        let name = field.rawValue
        let mine = app[field] ?? .null
        let theirs = trello[field] ?? .null
        let stamp = stamps[name]
        var pendingValue = waitingValue(of: field)
        // What our own write sent back to the apps (`SyncWrite.tell`) is theirs, not a Trello edit they have not seen;
        // once they change the field again, that value is rewritten with the new one, or it would undo it.
        var told = false
        if let value = pendingValue, stamps[SyncWrite.toldStamp(name)]?.hash == value.fieldHash {
            pendingValue = nil
            told = value != (mine == theirs ? theirs : mine)
        }
        if mine == theirs {
            plan.holds.insert(name)
            // Both sides agree (an earlier attempt wrote it, say): make the stamp say so too.
            if pendingValue == nil, stamp?.hash != theirs.fieldHash { plan.agreed[field] = theirs }
            if told { plan.winning[field] = theirs }
            return
        }
        // A field an earlier attempt of this item began writing holds part of our own write, not a Trello edit.
        let trelloChanged = !begun.contains(field) && ((stamp.map { $0.hash != theirs.fieldHash } ?? false) || pendingValue != nil)
        guard trelloChanged else {
            plan.holds.insert(name)
            plan.write[field] = mine
            // A move waiting for the apps carries the field's older value: it is rewritten with this one, or applying
            // the move would undo the edit.
            let carried = pending?.changeType == .move && pending?.fields[field] != nil
            if told || carried { plan.winning[field] = mine }
            plan.activity.append(activity(.change, field, old: theirs, new: mine))
            return
        }
        // When Trello's side changed: the action time we stamped, or the card's last activity.
        let theirTime = stamp.flatMap { $0.hash == theirs.fieldHash ? $0.time : nil } ?? cardTime
        let (appWins, rule) = decide(field, mine: mine, theirs: theirs, theirTime: theirTime, conflicts: &plan.conflicts)
        // The value set aside is `old`, the one that stands is `new`.
        plan.activity.append(
            activity(.conflict, field, old: appWins ? theirs : mine, new: appWins ? mine : theirs, rule: rule, kept: appWins ? .reminders : .trello))
        if appWins {
            plan.holds.insert(name)
            plan.write[field] = mine
            plan.winning[field] = mine
        } else if pendingValue != theirs {
            plan.toApps[field] = theirs
        }
    }

    /// The value of `field` in the change waiting for the apps: none for a delete, nor for a field a move carries
    /// without having changed it; an all-day date as the instant the card holds for it.
    private func waitingValue(of field: SyncField) -> JSONValue? {
        guard let pending, pending.changeType != .delete else { return nil }
        if pending.changeType == .move, !pending.changedFields.contains(field.rawValue) { return nil }
        return pending.fields[field].map { FieldStamps.takeDay(field, $0, stamps: stamps) }
    }

    /// Whose value stands when both sides changed `field`, and by which rule.
    private func decide(
        _ field: SyncField, mine: JSONValue, theirs: JSONValue, theirTime: Double, conflicts: inout [NewConflict]
    ) -> (appWins: Bool, rule: ConflictRule) {
        if field == .completed, abs(appTime - theirTime) <= 2 {
            return (mine == .bool(true), .doneWins)  // within two seconds, done wins
        }
        // A field Trello's side never reaches the apps for: the app's value is the only one there is.
        guard settings.syncsToReminders(field) else { return (true, .oneWay) }
        let policy = settings.conflictPolicy(of: field, account: accountPolicy)
        switch policy {
        case .preferReminders: return (true, ConflictRule(policy))
        case .preferTrello: return (false, ConflictRule(policy))
        case .lww: return (appTime >= theirTime, ConflictRule(policy))
        case .manual:
            // The app's own value (an all-day date as its day), as the user will be shown and may choose it.
            conflicts.append(NewConflict(field: field.rawValue, trelloValue: theirs, remindersValue: days[field.rawValue] ?? mine))
            return (false, ConflictRule(policy))
        }
    }

    private func activity(
        _ kind: ActivityKind, _ field: SyncField, old: JSONValue, new: JSONValue, rule: ConflictRule? = nil, kept: SyncSide? = nil
    ) -> NewActivity {
        NewActivity(
            kind: kind, syncListID: origin.syncListID, cardID: origin.cardID, reminderID: origin.reminderID, side: .reminders,
            field: field.rawValue, oldValue: old, newValue: new, rule: rule, kept: kept,
            message: rule == .manual ? "an open conflict: Trello's value stands until the user chooses" : nil, jobID: origin.jobID)
    }
}
