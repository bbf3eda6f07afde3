public import Foundation

/// A card of `GET /dailyroundup/lists/{id}/cards`: its reminder (nil while its create waits for the apps) and every
/// field as last synced.
public typealias ListCard = Components.Schemas.ListCard

// MARK: A list's vocabulary and cards

extension RoundupClient {
    /// The list with its board's vocabulary, read from Trello as it is asked: `labels` (`{id, name, color}`) and
    /// `priorityOptions` (`{id, text, level}`, the level on EventKit's scale), for the app to offer. When Trello cannot be
    /// asked, `labels` is nil and `vocabularyError` says why (the options are the ones last stored).
    public func list(_ id: String) async throws -> SyncList {
        switch try await call({ try await api.getSyncList(path: .init(id: id)) }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    /// One page of the list's cards, from the server's store: `cursor` is the page before's `nextCursor` (nil: the first).
    public func listCardsPage(_ listID: String, cursor: String? = nil, limit: Int = 200) async throws -> (cards: [ListCard], nextCursor: String?) {
        switch try await call({ try await api.listCards(path: .init(id: listID), query: .init(cursor: cursor, limit: limit)) }) {
        case .ok(let ok):
            let page = try ok.body.json
            return (page.cards, page.nextCursor)
        case let other: throw Self.unexpected(other)
        }
    }

    /// Every card of the list, page by page: what a new or reinstalled device reads before it pulls, to match the
    /// reminders it already has (by `reminderId`) and keep each card's fields as last synced. A card whose
    /// `reminderId` is nil is on its way as a `create` change: leave it to the pull.
    public func listCards(_ listID: String, pageSize: Int = 200) async throws -> [ListCard] {
        var cards: [ListCard] = []
        var cursor: String?
        repeat {
            let page = try await listCardsPage(listID, cursor: cursor, limit: pageSize)
            cards += page.cards
            cursor = page.nextCursor
        } while cursor != nil
        return cards
    }
}

// MARK: Dates as people set them

/// A due or start date as the server gives and takes it (`ReminderDate`): a day, for an all-day reminder (`YYYY-MM-DD`;
/// EventKit's date components without a time), or an instant.
public enum ReminderDateValue: Sendable, Hashable, CustomStringConvertible {
    case day(year: Int, month: Int, day: Int)
    case instant(Date)

    /// Reads `2026-12-01` as a day, an ISO 8601 date-time with any offset as an instant; nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        if text.utf8.count == 10, parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let day = Int(parts[2]), (1...12).contains(month), (1...31).contains(day)
        {
            self = .day(year: year, month: month, day: day)
            return
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) {
            self = .instant(date)
            return
        }
        formatter.formatOptions = [.withInternetDateTime]
        guard let date = formatter.date(from: text) else { return nil }
        self = .instant(date)
    }

    /// From EventKit's `dueDateComponents`: a day when they have no hour, else the instant they name in `calendar`.
    public init?(_ components: DateComponents, calendar: Calendar = .current) {
        if components.hour == nil, let year = components.year, let month = components.month, let day = components.day {
            self = .day(year: year, month: month, day: day)
        } else if let date = calendar.date(from: components) {
            self = .instant(date)
        } else {
            return nil
        }
    }

    /// As the server takes it: `YYYY-MM-DD`, or the instant in UTC with milliseconds.
    public var description: String {
        switch self {
        case .day(let year, let month, let day):
            return String(format: "%04d-%02d-%02d", year, month, day)
        case .instant(let date):
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            return formatter.string(from: date)
        }
    }

    /// For EventKit's `dueDateComponents`: year, month and day for a day (no time, an all-day reminder); the instant's
    /// components in `calendar` otherwise.
    public func dateComponents(in calendar: Calendar = .current) -> DateComponents {
        switch self {
        case .day(let year, let month, let day):
            return DateComponents(year: year, month: month, day: day)
        case .instant(let date):
            var components = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
            components.timeZone = calendar.timeZone
            return components
        }
    }
}

extension Components.Schemas.ChangeFields {
    /// `dueDate` typed: a day or an instant (nil: none, or not a date).
    public var due: ReminderDateValue? { dueDate.flatMap(ReminderDateValue.init) }
    /// `startDate` typed.
    public var start: ReminderDateValue? { startDate.flatMap(ReminderDateValue.init) }
}
