public import Foundation
public import RoundupClient

/// A field of a reminder the engine keeps in sync with its card (its name is the server's).
public enum ReminderField: String, Sendable, Hashable, Codable, CaseIterable {
    case title, notes, dueDate = "due_date", startDate = "start_date", completed, priority = "priority_level", url
    case labels, checklists, attachments, location, dueReminderMinutes = "due_reminder_minutes"

    /// What EventKit's `EKReminder` holds in its own properties: the title, notes, due and start dates, completion,
    /// priority and URL. A store that keeps more (alarms for the location and the due reminder, tags for the labels,
    /// its own records for checklists and attachments) says so in `RemindersStore.carriedFields`.
    public static let basic: Set<ReminderField> = [.title, .notes, .dueDate, .startDate, .completed, .priority, .url]

    var syncName: Components.Schemas.SyncFieldName { Components.Schemas.SyncFieldName(rawValue: rawValue)! }
}

/// A label of the card: the board's, named and coloured by it. One the app adds has a name (the board's label of that
/// name, any case) and no id until the card comes back with it.
public struct ReminderLabel: Sendable, Hashable, Codable {
    public var id: String?
    public var name: String?
    public var color: String?
    public init(id: String? = nil, name: String?, color: String? = nil) {
        self.id = id
        self.name = name
        self.color = color
    }
}

/// A checklist of the card; one the app adds (or an item it adds) has no id until the card comes back with it.
public struct ReminderChecklist: Sendable, Hashable, Codable {
    public struct Item: Sendable, Hashable, Codable {
        public var id: String?
        public var name: String
        public var completed: Bool
        public init(id: String? = nil, name: String, completed: Bool = false) {
            self.id = id
            self.name = name
            self.completed = completed
        }
    }
    public var id: String?
    public var name: String
    public var items: [Item]
    public init(id: String? = nil, name: String, items: [Item] = []) {
        self.id = id
        self.name = name
        self.items = items
    }
}

/// An attachment of the card: a link, or a file uploaded to Trello (which the apps show and never remove). One the
/// app adds is a link without an id.
public struct ReminderAttachment: Sendable, Hashable, Codable {
    public var id: String?
    public var name: String?
    public var url: String?
    public var isUpload: Bool
    public var mimeType: String?
    public init(id: String? = nil, name: String? = nil, url: String?, isUpload: Bool = false, mimeType: String? = nil) {
        self.id = id
        self.name = name
        self.url = url
        self.isUpload = isUpload
        self.mimeType = mimeType
    }
}

/// The values of a reminder the engine keeps in sync with its card, typed as EventKit holds them, and the card's
/// values EventKit has no property for (labels, checklists, attachments), for a store that keeps them.
public struct ReminderValues: Sendable, Hashable, Codable {
    public var title: String
    public var notes: String
    public var dueDate: ReminderDateValue?
    public var startDate: ReminderDateValue?
    public var completed: Bool
    /// EventKit's priority: 0 none, 1 high … 9 low.
    public var priority: Int
    /// The card's first link (`EKReminder.url`); the same link is the first link of `attachments`.
    public var url: String?
    /// The card's labels, in its order.
    public var labels: [ReminderLabel]
    public var checklists: [ReminderChecklist]
    /// Links and uploaded files, in the card's order.
    public var attachments: [ReminderAttachment]
    /// Where the card is (an `EKAlarm`'s `structuredLocation` in an app).
    public var location: Location?
    /// Trello's due reminder: minutes before the due date (an `EKAlarm`'s `relativeOffset` in an app).
    public var dueReminderMinutes: Int?

    public init(
        title: String, notes: String = "", dueDate: ReminderDateValue? = nil, startDate: ReminderDateValue? = nil, completed: Bool = false,
        priority: Int = 0, url: String? = nil, labels: [ReminderLabel] = [], checklists: [ReminderChecklist] = [],
        attachments: [ReminderAttachment] = [], location: Location? = nil, dueReminderMinutes: Int? = nil
    ) {
        self.title = title
        self.notes = notes
        self.dueDate = dueDate
        self.startDate = startDate
        self.completed = completed
        self.priority = priority
        self.url = url
        self.labels = labels
        self.checklists = checklists
        self.attachments = attachments
        self.location = location
        self.dueReminderMinutes = dueReminderMinutes
    }

    private enum CodingKeys: String, CodingKey {
        case title, notes, dueDate, startDate, completed, priority, url, labels, checklists, attachments, location, dueReminderMinutes
    }

    // A state saved before a field was carried reads it as none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            title: try c.decode(String.self, forKey: .title), notes: try c.decodeIfPresent(String.self, forKey: .notes) ?? "",
            dueDate: try c.decodeIfPresent(ReminderDateValue.self, forKey: .dueDate),
            startDate: try c.decodeIfPresent(ReminderDateValue.self, forKey: .startDate),
            completed: try c.decodeIfPresent(Bool.self, forKey: .completed) ?? false,
            priority: try c.decodeIfPresent(Int.self, forKey: .priority) ?? 0,
            url: try c.decodeIfPresent(String.self, forKey: .url), labels: try c.decodeIfPresent([ReminderLabel].self, forKey: .labels) ?? [],
            checklists: try c.decodeIfPresent([ReminderChecklist].self, forKey: .checklists) ?? [],
            attachments: try c.decodeIfPresent([ReminderAttachment].self, forKey: .attachments) ?? [],
            location: try c.decodeIfPresent(Location.self, forKey: .location),
            dueReminderMinutes: try c.decodeIfPresent(Int.self, forKey: .dueReminderMinutes))
    }

    /// Whether `field` holds the same value here and in `other`.
    func same(_ field: ReminderField, as other: ReminderValues) -> Bool {
        switch field {
        case .title: title == other.title
        case .notes: notes == other.notes
        case .dueDate: dueDate == other.dueDate
        case .startDate: startDate == other.startDate
        case .completed: completed == other.completed
        case .priority: priority == other.priority
        case .url: url == other.url
        case .labels: labels == other.labels
        case .checklists: checklists == other.checklists
        case .attachments: attachments == other.attachments
        case .location: location == other.location
        case .dueReminderMinutes: dueReminderMinutes == other.dueReminderMinutes
        }
    }

    /// Sets `field` to `other`'s value.
    mutating func take(_ field: ReminderField, from other: ReminderValues) {
        switch field {
        case .title: title = other.title
        case .notes: notes = other.notes
        case .dueDate: dueDate = other.dueDate
        case .startDate: startDate = other.startDate
        case .completed: completed = other.completed
        case .priority: priority = other.priority
        case .url: url = other.url
        case .labels: labels = other.labels
        case .checklists: checklists = other.checklists
        case .attachments: attachments = other.attachments
        case .location: location = other.location
        case .dueReminderMinutes: dueReminderMinutes = other.dueReminderMinutes
        }
    }

    /// These values with only `fields` kept (the others as none): what a store that carries those fields holds.
    func keeping(_ fields: Set<ReminderField>) -> ReminderValues {
        guard fields.count < ReminderField.allCases.count else { return self }
        var values = ReminderValues(title: "")
        for field in fields { values.take(field, from: self) }
        return values
    }

    /// The fields whose values differ from `other`'s, as the server names them.
    func fields(differingFrom other: ReminderValues) -> [Components.Schemas.SyncFieldName] {
        ReminderField.allCases.filter { !same($0, as: other) }.map(\.syncName)
    }

    /// These values, with each field `local` holds as `card` does taken from `card`.
    func adopting(_ card: ReminderValues, heldBy local: ReminderValues) -> ReminderValues {
        var values = self
        for field in ReminderField.allCases where local.same(field, as: card) { values.take(field, from: card) }
        return values
    }

    /// What the server is sent: the fields `carried` (a create writes each field given; an update reads those its
    /// change names), checklists and attachments as what changed since `synced` (new ones without ids, removed ones
    /// deleted).
    func syncFields(since synced: ReminderValues?, carrying carried: Set<ReminderField>) -> SyncFields {
        var fields = allSyncFields(since: synced)
        for field in ReminderField.allCases where !carried.contains(field) {
            switch field {
            case .title: fields.title = nil
            case .notes: fields.notes = nil
            case .dueDate: fields.dueDate = nil
            case .startDate: fields.startDate = nil
            case .completed: fields.completed = nil
            case .priority: fields.priorityLevel = nil
            case .url: fields.url = nil
            case .labels: fields.labels = nil
            case .checklists: fields.checklists = nil
            case .attachments: fields.attachments = nil
            case .location: fields.location = nil
            case .dueReminderMinutes: fields.dueReminderMinutes = nil
            }
        }
        return fields
    }

    private func allSyncFields(since synced: ReminderValues?) -> SyncFields {
        SyncFields(
            title: title, notes: notes, dueDate: dueDate?.description, startDate: startDate?.description, completed: completed,
            priorityLevel: priority, url: url,
            labels: labels.map { LabelInput(id: $0.id, name: $0.id == nil ? $0.name : nil, color: $0.id == nil ? $0.color : nil) },
            checklists: Self.checklistChanges(from: synced?.checklists ?? [], to: checklists), location: location,
            dueReminderMinutes: dueReminderMinutes, attachments: Self.attachmentChanges(from: synced?.attachments ?? [], to: attachments))
    }

    /// The checklists' changes from `before` to `after`: a checklist or item with no id (or one `before` lacks) is new,
    /// one `before` has and `after` lacks is deleted, one renamed or ticked is sent with what changed.
    static func checklistChanges(from before: [ReminderChecklist], to after: [ReminderChecklist]) -> [ChecklistInput] {
        var changes: [ChecklistInput] = []
        let old = Dictionary(before.compactMap { list in list.id.map { ($0, list) } }, uniquingKeysWith: { first, _ in first })
        for list in after {
            guard let id = list.id, let was = old[id] else {
                changes.append(ChecklistInput(name: list.name, items: list.items.map { CheckItemInput(name: $0.name, completed: $0.completed) }))
                continue
            }
            let oldItems = Dictionary(was.items.compactMap { item in item.id.map { ($0, item) } }, uniquingKeysWith: { first, _ in first })
            var items: [CheckItemInput] = []
            for item in list.items {
                guard let itemID = item.id, let wasItem = oldItems[itemID] else {
                    items.append(CheckItemInput(name: item.name, completed: item.completed))
                    continue
                }
                if wasItem != item {
                    items.append(
                        CheckItemInput(
                            id: itemID, name: wasItem.name == item.name ? nil : item.name,
                            completed: wasItem.completed == item.completed ? nil : item.completed))
                }
            }
            let kept = Set(list.items.compactMap(\.id))
            for item in was.items { if let itemID = item.id, !kept.contains(itemID) { items.append(CheckItemInput(id: itemID, deleted: true)) } }
            if was.name != list.name || !items.isEmpty {
                changes.append(ChecklistInput(id: id, name: was.name == list.name ? nil : list.name, items: items))
            }
        }
        let kept = Set(after.compactMap(\.id))
        for list in before { if let id = list.id, !kept.contains(id) { changes.append(ChecklistInput(id: id, deleted: true)) } }
        return changes
    }

    /// The attachments' changes from `before` to `after`: a link with no id (or one `before` lacks) is added, a link
    /// `before` has and `after` lacks is removed (an uploaded file is never removed).
    static func attachmentChanges(from before: [ReminderAttachment], to after: [ReminderAttachment]) -> [AttachmentInput] {
        let known = Set(before.compactMap(\.id))
        var changes = after.filter { !$0.isUpload && $0.url != nil && ($0.id.map { !known.contains($0) } ?? true) }.map {
            AttachmentInput(name: $0.name, url: $0.url)
        }
        let kept = Set(after.compactMap(\.id))
        for attachment in before where !attachment.isUpload {
            if let id = attachment.id, !kept.contains(id) { changes.append(AttachmentInput(id: id, deleted: true)) }
        }
        return changes
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
        if carries(.labels) { values.labels = (fields.labels ?? []).map { ReminderLabel(id: $0.id, name: $0.name, color: $0.color) } }
        if carries(.checklists) {
            values.checklists = (fields.checklists ?? []).map { list in
                ReminderChecklist(id: list.id, name: list.name, items: list.items.map { .init(id: $0.id, name: $0.name, completed: $0.completed) })
            }
        }
        if carries(.attachments) {
            values.attachments = (fields.attachments ?? []).map {
                ReminderAttachment(id: $0.id, name: $0.name, url: $0.url, isUpload: $0.isUpload, mimeType: $0.mimeType)
            }
        }
        if carries(.location) { values.location = fields.location }
        if carries(.dueReminderMinutes) { values.dueReminderMinutes = fields.dueReminderMinutes }
        return values
    }

    /// The fields `fields` holds a value for (a null one is as absent: the generated types do not tell them apart).
    static func names(in fields: ChangeFields) -> Set<String> {
        var names: Set<String> = []
        func note(_ name: Roundup.FieldName, _ present: Bool) { if present { names.insert(name.rawValue) } }
        note(.title, fields.title != nil)
        note(.notes, fields.notes != nil)
        note(.dueDate, fields.dueDate != nil)
        note(.startDate, fields.startDate != nil)
        note(.completed, fields.completed != nil)
        note(.priorityLevel, fields.priorityLevel != nil)
        note(.url, fields.url != nil)
        note(.labels, fields.labels != nil)
        note(.checklists, fields.checklists != nil)
        note(.attachments, fields.attachments != nil)
        note(.location, fields.location != nil)
        note(.dueReminderMinutes, fields.dueReminderMinutes != nil)
        return names
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
    /// The fields this store keeps and reads back as written (`ReminderField.basic` unless it says more). The engine
    /// reads and sends only these: a field the store cannot hold is never taken for the person's edit (an empty value
    /// sent over the card's), and never written into the store.
    var carriedFields: Set<ReminderField> { get }
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

extension RemindersStore {
    public var carriedFields: Set<ReminderField> { ReminderField.basic }
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
