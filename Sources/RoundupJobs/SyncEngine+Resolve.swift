import Foundation
public import RoundupCore
public import RoundupStore
import RoundupTrello

/// Why a resolution could not be applied.
public enum ResolveError: Error, Sendable, Equatable {
    case notFound
    case alreadyResolved
    /// Another request is resolving it right now.
    case inProgress
    case invalid(String)
    /// Trello refused or could not be reached; nothing was marked resolved.
    case trello(String)
}

extension SyncEngine {
    static func resolveError(_ error: any Error) -> any Error {
        switch error {
        case let error as TrelloError: return ResolveError.trello(error.description)
        case let failure as ItemFailure: return ResolveError.invalid(failure.description)
        default: return error
        }
    }

    /// Applies the user's choice for a conflict: Trello's value goes to the apps, or the reminder's (or a new)
    /// value goes to Trello (and to the apps), then the conflict is marked resolved.
    public func resolveConflict(accountID: String, id: Int64, choice: ConflictChoice, value: JSONValue?) async throws -> ConflictDetail {
        guard let conflict = try await store.conflict(accountID: accountID, id: id) else { throw ResolveError.notFound }
        guard conflict.record.status == .open else { throw ResolveError.alreadyResolved }
        guard let field = SyncField(rawValue: conflict.record.field) else {
            throw ResolveError.invalid("the conflict's field \(conflict.record.field) is no field this server knows")
        }
        var chosen: JSONValue?
        var days = DayDates()
        switch choice {
        case .trello: chosen = nil
        case .reminders:
            chosen = conflict.record.remindersValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null
        case .value:
            guard let value else { throw ResolveError.invalid("value is required when choice is value") }
            do {
                chosen = try SyncFields.normalize(field, value, path: "value")
            } catch let error as SyncFields.Invalid {
                throw ResolveError.invalid(error.description)
            }
        }
        guard let cardID = conflict.record.trelloCardID, let listID = conflict.record.syncListID else { throw ResolveError.notFound }
        guard try await store.claimResolution(accountID: accountID, table: .conflicts, id: id) else {
            throw try await isGone(.conflicts, accountID: accountID, id: id) ? ResolveError.notFound : ResolveError.inProgress
        }
        do {
            var state = try await makeState(accountID: accountID, jobID: nil)
            // The list was deleted since (and the conflict with it).
            guard let list = state.lists[listID] else { throw ResolveError.notFound }
            guard let card = try await trello.card(id: cardID, credentials: state.credentials), card["closed"]?.boolValue != true else {
                throw ResolveError.invalid("the card no longer exists in Trello")
            }
            var record = SyncWrite(accountID: accountID, syncListID: list.id, cardID: cardID, reminderID: conflict.record.reminderID)
            let now = Date().timeIntervalSince1970
            var marks: [String] = []
            if chosen != nil, !list.settings.syncsToTrello(field) {
                throw ResolveError.invalid("the list's settings keep \(field) from Trello now: resolve with trello")
            }
            let priority = try await priorityField(list, state: &state)
            let current = CardMapper.fields(fromCard: card, priority: priority)[field] ?? .null
            // An all-day date chosen (the day the app sent, or a day given as the value) is written as it is for a sync.
            if let value = chosen {
                var one = [field.rawValue: value]
                days = DayDates(&one, only: nil, timeZone: state.timeZone)
                chosen = one[field.rawValue]
            }
            if let chosen {
                marks = [echo.fieldKey(account: accountID, card: cardID, field: field.rawValue, value: chosen)]
                let written = try await writeFields([field.rawValue: chosen], card: card, list: list, marks: &marks, state: &state)
                record.stamps = written.stamps
                record.values = written.values
                record.winning = [field.rawValue: written.values[field] ?? chosen]
                // The apps may have applied Trello's value meanwhile: send them the chosen one either way (as the card
                // now holds it, with what changed with it).
                // The card's form of what the app chose (label ids, new items' ids) is the app's own value: told, so its
                // next edit of the field is no conflict.
                record.tell(written.values.filter { list.settings.syncsToReminders(named: $0.key) && $0.key != field.rawValue }, time: now)
                record.tell([field.rawValue: written.values[field] ?? chosen], time: now)
                days.record(into: &record, fields: [field.rawValue])
            } else {
                record.toApps = [field.rawValue: current]
                record.stamp(field, current, time: now)
            }
            let remindersValue = conflict.record.remindersValue.flatMap { try? JSONParser.parse(Array($0.utf8)) } ?? .null
            record.activity = [
                NewActivity(
                    kind: .resolved, syncListID: list.id, cardID: cardID, reminderID: conflict.record.reminderID, field: field.rawValue,
                    oldValue: chosen == nil ? remindersValue : current, newValue: chosen ?? current, rule: .manual,
                    kept: choice == .trello ? .trello : .reminders, message: "conflict \(id) resolved by the user: \(choice.rawValue)")
            ]
            _ = try await store.recordSyncWrite(record)
            await echo.clear(marks)
        } catch {
            try? await store.releaseResolution(accountID: accountID, table: .conflicts, id: id)
            throw await resolveError(error, .conflicts, accountID: accountID, id: id)
        }
        guard try await store.resolveConflict(accountID: accountID, id: id, resolution: choice) else {
            throw try await isGone(.conflicts, accountID: accountID, id: id) ? ResolveError.notFound : ResolveError.alreadyResolved
        }
        // Resolved, then deleted with its list before it could be read back: gone, as far as the app can tell.
        guard let resolved = try await store.conflict(accountID: accountID, id: id) else { throw ResolveError.notFound }
        return resolved
    }

    /// `merge`: the reminder is the card; the card's fields go to the app as an update carrying the mapping.
    /// `keep_both`: a card is made for the reminder.
    public func resolveDuplicate(accountID: String, id: Int64, action: DuplicateAction) async throws -> DuplicateDetail {
        guard let duplicate = try await store.duplicate(accountID: accountID, id: id) else { throw ResolveError.notFound }
        guard duplicate.record.status == .open else { throw ResolveError.alreadyResolved }
        guard let reminderID = duplicate.record.reminderID else { throw ResolveError.invalid("the duplicate has no reminder") }
        guard try await store.claimResolution(accountID: accountID, table: .duplicates, id: id) else {
            throw try await isGone(.duplicates, accountID: accountID, id: id) ? ResolveError.notFound : ResolveError.inProgress
        }
        do {
            var state = try await makeState(accountID: accountID, jobID: nil)
            // The list was deleted since (and the duplicate with it).
            guard let list = state.lists[duplicate.record.syncListID] else { throw ResolveError.notFound }
            if action == .merge {
                let cardID = duplicate.record.trelloCardID
                guard let card = try await trello.card(id: cardID, credentials: state.credentials), card["closed"]?.boolValue != true else {
                    throw ResolveError.invalid("the card no longer exists in Trello; resolve with keep_both")
                }
                if let other = try await store.task(accountID: accountID, cardID: cardID), let mapped = other.reminderID, mapped != reminderID,
                    !other.deleted
                {
                    throw ResolveError.invalid("the card is mapped to another reminder now; resolve with keep_both")
                }
                let priority = try await priorityField(list, state: &state)
                let fields = CardMapper.fields(fromCard: card, priority: priority)
                var record = SyncWrite(accountID: accountID, syncListID: list.id, cardID: cardID, reminderID: reminderID)
                let now = Date().timeIntervalSince1970
                for (field, value) in fields { record.stamp(field, value, time: now) }
                record.toApps = fields
                record.activity = [
                    NewActivity(
                        kind: .resolved, syncListID: list.id, cardID: cardID, reminderID: reminderID, newValue: .object(fields),
                        message: "possible duplicate \(id) merged by the user: the reminder is the card")
                ]
                _ = try await store.recordSyncWrite(record)
            } else {
                guard list.settings.direction.toTrello else {
                    throw ResolveError.invalid("the list syncs \(list.settings.direction.rawValue): keep_both would make a card; resolve with merge")
                }
                // The reminder's all-day dates, kept as days, written as for a sync.
                var fields = duplicate.fields
                let days = DayDates(&fields, only: nil, timeZone: state.timeZone)
                _ = try await createCard(
                    fields, reminderID: reminderID, list: list, days: days, state: &state,
                    note: "possible duplicate \(id) kept as two by the user: a card was made for the reminder")
            }
        } catch {
            try? await store.releaseResolution(accountID: accountID, table: .duplicates, id: id)
            throw await resolveError(error, .duplicates, accountID: accountID, id: id)
        }
        guard try await store.resolveDuplicate(accountID: accountID, id: id, status: action.status) else {
            throw try await isGone(.duplicates, accountID: accountID, id: id) ? ResolveError.notFound : ResolveError.alreadyResolved
        }
        guard let resolved = try await store.duplicate(accountID: accountID, id: id) else { throw ResolveError.notFound }
        return resolved
    }

    /// Whether the conflict or duplicate no longer exists (its list, or account, was deleted meanwhile).
    func isGone(_ table: ResolutionTable, accountID: String, id: Int64) async throws -> Bool {
        switch table {
        case .conflicts: return try await store.conflict(accountID: accountID, id: id) == nil
        case .duplicates: return try await store.duplicate(accountID: accountID, id: id) == nil
        }
    }

    /// The error a failed resolution answers with. A store write refused because the list went away meanwhile (its
    /// rows, this one included, deleted while Trello was being written) is `notFound`, not a server failure.
    func resolveError(_ error: any Error, _ table: ResolutionTable, accountID: String, id: Int64) async -> any Error {
        switch error {
        case is ResolveError, is TrelloError, is ItemFailure: return Self.resolveError(error)
        default:
            let gone = (try? await isGone(table, accountID: accountID, id: id)) ?? false
            return gone ? ResolveError.notFound : error
        }
    }
}
