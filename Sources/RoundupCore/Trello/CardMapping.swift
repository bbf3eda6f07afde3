import Foundation

/// The fields the apps see, named as they are on the wire (`changed_fields`, the keys of `fields`): the raw values.
/// Interpolated, a field reads as its wire name.
public enum SyncField: String, CaseIterable, Sendable, Hashable, Codable, Comparable, CustomStringConvertible {
    case title, notes
    case dueDate = "due_date"
    case startDate = "start_date"
    case completed, priority
    /// The priority on EventKit's scale: 0 none, 1 highest … 9 lowest (`PriorityField.level(of:)`).
    case priorityLevel = "priority_level"
    case labels, checklists, url, location
    /// Every attachment of the card (`url` keeps the first link, for apps that show one).
    case attachments
    /// The card's own page in Trello (`shortUrl`).
    case trelloURL = "trello_url"
    /// Trello's due reminder: minutes before the due date, null when none.
    case dueReminderMinutes = "due_reminder_minutes"

    /// Every field, in the order the apps' documentation lists them.
    public static let all: [SyncField] = allCases
    /// Their wire names, in that order (for messages that list them).
    public static let names: [String] = all.map(\.rawValue)

    public var description: String { rawValue }

    /// In the order of their wire names.
    public static func < (a: SyncField, b: SyncField) -> Bool { a.rawValue < b.rawValue }

    /// Trello card attribute → field, for attributes an `updateCard` payload carries itself. Labels are not among them:
    /// a payload names their ids only, and the apps get names and colours, which a read of the card gives.
    public static let fromCardAttribute: [String: SyncField] = [
        "name": .title, "desc": .notes, "due": .dueDate, "start": .startDate, "dueComplete": .completed, "dueReminder": .dueReminderMinutes,
    ]
}

extension Dictionary where Key == String {
    /// A field's value in a fields object (keyed by wire name).
    public subscript(_ field: SyncField) -> Value? {
        get { self[field.rawValue] }
        set { self[field.rawValue] = newValue }
    }
}

/// Maps a full Trello card (`GET /cards/{id}?fields=all&customFieldItems=true&checklists=all&attachments=true`)
/// to the fields the apps see.
public enum CardMapper {
    public static func fields(fromCard card: [String: JSONValue], priority: PriorityField? = nil) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        fields[SyncField.title] = card["name"] ?? .string("")
        fields[SyncField.notes] = card["desc"] ?? .string("")
        fields[SyncField.dueDate] = card["due"] ?? .null
        fields[SyncField.startDate] = card["start"] ?? .null
        fields[SyncField.completed] = .bool(card["dueComplete"]?.boolValue ?? false)
        fields[SyncField.labels] = labels(card)
        fields[SyncField.checklists] = .array((card["checklists"]?.arrayValue ?? []).compactMap(checklist))
        fields[SyncField.url] = urlAttachment(card["attachments"]?.arrayValue ?? [])
        fields[SyncField.attachments] = attachments(card["attachments"]?.arrayValue ?? [])
        fields[SyncField.location] = location(card)
        fields[SyncField.trelloURL] = card["shortUrl"]?.stringValue.map(JSONValue.string) ?? .null
        fields[SyncField.dueReminderMinutes] = dueReminder(card["dueReminder"])
        let option = priority.flatMap { priorityOption(card["customFieldItems"]?.arrayValue ?? [], priority: $0) }
        fields[SyncField.priority] = option.map { .string($0.text.lowercased()) } ?? .null
        fields[SyncField.priorityLevel] = .number(Double(option.map { priority?.level(of: $0.id) ?? 0 } ?? 0))
        return fields
    }

    /// Maps the attributes an `updateCard` payload carries (`data.card`) for the keys that changed (`data.old`).
    public static func partialFields(card: [String: JSONValue], changedAttributes: some Sequence<String>) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        for attribute in changedAttributes {
            guard let field = SyncField.fromCardAttribute[attribute] else { continue }
            let value = card[attribute] ?? .null
            switch field {
            case .completed: fields[field] = .bool(value.boolValue ?? false)
            case .dueReminderMinutes: fields[field] = dueReminder(value)
            case .title, .notes: fields[field] = value == .null ? .string("") : value
            default: fields[field] = value
            }
        }
        return fields
    }

    /// `[{id, name, color}]` in the card's order (`idLabels`), names and colours from the card's `labels` (a full read
    /// carries them); a label the card names without them has null name and colour.
    private static func labels(_ card: [String: JSONValue]) -> JSONValue {
        let objects = (card["labels"]?.arrayValue ?? []).compactMap(\.objectValue)
        var known: [String: [String: JSONValue]] = [:]
        for object in objects { if let id = object["id"]?.stringValue { known[id] = object } }
        let ids = card["idLabels"]?.arrayValue?.compactMap(\.stringValue) ?? objects.compactMap { $0["id"]?.stringValue }
        return .array(
            ids.map { id in
                let label = known[id]
                return .object([
                    "id": .string(id), "name": label?["name"]?.stringValue.map(JSONValue.string) ?? .null,
                    "color": label?["color"]?.stringValue.map(JSONValue.string) ?? .null,
                ])
            })
    }

    /// The `attachments` field of a card's attachments (as Trello lists them).
    public static func attachments(_ attachments: [JSONValue]) -> JSONValue { .array(attachments.compactMap(attachment)) }

    /// One attachment: `{id, name, url, is_upload, mime_type}`.
    private static func attachment(_ value: JSONValue) -> JSONValue? {
        guard let object = value.objectValue, let id = object["id"]?.stringValue else { return nil }
        return .object([
            "id": .string(id), "name": object["name"]?.stringValue.map(JSONValue.string) ?? .null,
            "url": object["url"]?.stringValue.map(JSONValue.string) ?? .null, "is_upload": .bool(object["isUpload"]?.boolValue ?? false),
            "mime_type": object["mimeType"]?.stringValue.map(JSONValue.string) ?? .null,
        ])
    }

    /// Trello's `dueReminder` (minutes before the due date; -1 or absent: none).
    private static func dueReminder(_ value: JSONValue?) -> JSONValue {
        guard case .number(let minutes)? = value, minutes >= 0 else { return .null }
        return .number(minutes.rounded())
    }

    private static func checklist(_ value: JSONValue) -> JSONValue? {
        guard let object = value.objectValue else { return nil }
        let items = (object["checkItems"]?.arrayValue ?? [])
            .compactMap { $0.objectValue }
            .sorted { ($0["pos"].flatMap(number) ?? 0) < ($1["pos"].flatMap(number) ?? 0) }
            .map { item -> JSONValue in
                .object([
                    "id": item["id"] ?? .null,
                    "name": item["name"] ?? .string(""),
                    "completed": .bool(item["state"]?.stringValue == "complete"),
                ])
            }
        return .object(["id": object["id"] ?? .null, "name": object["name"] ?? .string(""), "items": .array(items)])
    }

    private static func number(_ value: JSONValue) -> Double? {
        if case .number(let n) = value { return n }
        return nil
    }

    private static func urlAttachment(_ attachments: [JSONValue]) -> JSONValue {
        for attachment in attachments {
            guard let object = attachment.objectValue else { continue }
            if object["isUpload"]?.boolValue == true { continue }
            if let url = object["url"]?.stringValue, !url.isEmpty { return .string(url) }
        }
        return .null
    }

    private static func location(_ card: [String: JSONValue]) -> JSONValue {
        // Trello clears a location to empty strings or nulls.
        let name = card["locationName"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let address = card["address"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        var coordinates = card["coordinates"]
        if coordinates == .string("") { coordinates = nil }
        if name == nil && address == nil && (coordinates == nil || coordinates == .null) { return .null }
        var object: [String: JSONValue] = [:]
        object["name"] = name.map(JSONValue.string) ?? .null
        object["address"] = address.map(JSONValue.string) ?? .null
        if let lat = coordinates?["latitude"], let lon = coordinates?["longitude"] {
            object["latitude"] = lat
            object["longitude"] = lon
        } else if let text = coordinates?.stringValue {
            let parts = text.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
            if parts.count == 2 {
                object["latitude"] = .number(parts[0])
                object["longitude"] = .number(parts[1])
            }
        }
        return .object(object)
    }

    /// The option of the board's Priority field the card holds (an option id the field no longer has: none).
    /// Whether the card holds an option of the board's Priority field that `priority` (as the server read it) lacks:
    /// an option added since, so the field is read again.
    public static func namesUnknownOption(_ card: [String: JSONValue], priority: PriorityField) -> Bool {
        for item in card["customFieldItems"]?.arrayValue ?? [] {
            guard let object = item.objectValue, object["idCustomField"]?.stringValue == priority.fieldID else { continue }
            if let optionID = object["idValue"]?.stringValue { return priority.option(id: optionID) == nil }
        }
        return false
    }

    private static func priorityOption(_ items: [JSONValue], priority: PriorityField) -> PriorityField.Option? {
        for item in items {
            guard let object = item.objectValue, object["idCustomField"]?.stringValue == priority.fieldID else { continue }
            if let optionID = object["idValue"]?.stringValue { return priority.option(id: optionID) }
        }
        return nil
    }
}
