public import Foundation
public import RoundupClient

/// The values of a reminder the engine keeps in sync with its card, typed as EventKit holds them.
///
/// Carried so far: the title, the notes, the due and start dates (a day for an all-day reminder, an instant for a
/// timed one), whether it is completed, its priority (EventKit's 0–9 scale) and its URL. The card's labels,
/// checklists, links and location are not yet carried by the engine (the server and `RoundupClient` carry them).
public struct ReminderValues: Sendable, Hashable, Codable {
    public var title: String
    public var notes: String
    public var dueDate: ReminderDateValue?
    public var startDate: ReminderDateValue?
    public var completed: Bool
    /// EventKit's priority: 0 none, 1 high … 9 low.
    public var priority: Int
    public var url: String?

    public init(
        title: String, notes: String = "", dueDate: ReminderDateValue? = nil, startDate: ReminderDateValue? = nil, completed: Bool = false,
        priority: Int = 0, url: String? = nil
    ) {
        self.title = title
        self.notes = notes
        self.dueDate = dueDate
        self.startDate = startDate
        self.completed = completed
        self.priority = priority
        self.url = url
    }

    /// The fields whose values differ from `other`'s, as the server names them.
    func fields(differingFrom other: ReminderValues) -> [Components.Schemas.SyncFieldName] {
        var fields: [Components.Schemas.SyncFieldName] = []
        if title != other.title { fields.append(.title) }
        if notes != other.notes { fields.append(.notes) }
        if dueDate != other.dueDate { fields.append(.dueDate) }
        if startDate != other.startDate { fields.append(.startDate) }
        if completed != other.completed { fields.append(.completed) }
        if priority != other.priority { fields.append(.priorityLevel) }
        if url != other.url { fields.append(.url) }
        return fields
    }

    /// These values, with each field `local` holds as `card` does taken from `card`.
    func adopting(_ card: ReminderValues, heldBy local: ReminderValues) -> ReminderValues {
        var values = self
        if local.title == card.title { values.title = card.title }
        if local.notes == card.notes { values.notes = card.notes }
        if local.dueDate == card.dueDate { values.dueDate = card.dueDate }
        if local.startDate == card.startDate { values.startDate = card.startDate }
        if local.completed == card.completed { values.completed = card.completed }
        if local.priority == card.priority { values.priority = card.priority }
        if local.url == card.url { values.url = card.url }
        return values
    }

    /// What the server sends, as a sync's fields.
    var syncFields: SyncFields {
        SyncFields(
            title: title, notes: notes, dueDate: dueDate?.description, startDate: startDate?.description, completed: completed,
            priorityLevel: priority, url: url)
    }

    /// These values with the fields a change carries set from it (the others as they are).
    func applying(_ fields: ChangeFields, only names: Set<String>?) -> ReminderValues {
        var values = self
        func carries(_ name: Roundup.FieldName) -> Bool { names.map { $0.contains(name.rawValue) } ?? true }
        if carries(.title), let title = fields.title { values.title = title }
        if carries(.notes), let notes = fields.notes { values.notes = notes }
        if carries(.dueDate) { values.dueDate = fields.due }
        if carries(.startDate) { values.startDate = fields.start }
        if carries(.completed), let completed = fields.completed { values.completed = completed }
        if carries(.priorityLevel) || carries(.priority) { values.priority = fields.priorityLevel ?? 0 }
        if carries(.url) { values.url = fields.url }
        return values
    }

    /// The values a create carries (a field it lacks as none).
    init(_ fields: ChangeFields) {
        self = ReminderValues(title: "").applying(fields, only: nil)
    }
}

/// A reminder of one of the synced lists, as the app's store holds it.
public struct Reminder: Sendable, Hashable, Codable {
    /// EventKit's `calendarItemExternalIdentifier`: the same on every device of the person (iCloud), which is how the
    /// server knows a reminder across them.
    public var id: String
    /// The sync list (`sync_list_id`) the reminder's list is paired with.
    public var listID: String
    public var values: ReminderValues
    /// When the person (or any device) last changed it: EventKit's `lastModifiedDate`. Sent as the edit's
    /// `modified_at`, by which the server tells a stale copy (older than Trello's edit) from a newer edit.
    public var modifiedAt: Date?

    public init(id: String, listID: String, values: ReminderValues, modifiedAt: Date? = nil) {
        self.id = id
        self.listID = listID
        self.values = values
        self.modifiedAt = modifiedAt
    }
}

/// The app's reminders, as the engine reads and writes them: in an app, an adapter over `EKEventStore` (see
/// Client/README.md, "The sync engine"); in tests, `InMemoryRemindersStore`.
///
/// Each call is one operation on the store, done when it returns. A reminder's `id` is EventKit's
/// `calendarItemExternalIdentifier`; a list is named by the sync list it is paired with (the app keeps which
/// `EKCalendar` that is).
public protocol RemindersStore: Sendable {
    /// Every reminder of the list, completed ones included.
    func reminders(inList listID: String) async throws -> [Reminder]
    /// The reminder, wherever it is; nil when there is none (deleted).
    func reminder(_ id: String) async throws -> Reminder?
    /// Makes a reminder in the list with these values; returns its id.
    func create(_ values: ReminderValues, inList listID: String) async throws -> String
    /// Sets the reminder's values (completing it is setting `completed`).
    func update(_ id: String, _ values: ReminderValues) async throws
    /// Moves the reminder to another list (the same reminder: its id stays).
    func move(_ id: String, toList listID: String) async throws
    /// Deletes the reminder (nothing when there is none).
    func delete(_ id: String) async throws
}

extension ReminderDateValue: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = ReminderDateValue(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a date: \(text)"))
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
