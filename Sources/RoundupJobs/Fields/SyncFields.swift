import Foundation
public import RoundupCore
import RoundupStore

/// The fields an app may send in a sync, checked and put in the form the apps see in changes (and the field
/// hashes are computed on), so a value written to Trello and the value its webhook carries back hash the same.
public enum SyncFields {
    public static let writable: [SyncField] = [
        .title, .notes, .dueDate, .startDate, .completed, .priority, .priorityLevel, .url, .labels, .checklists, .location, .dueReminderMinutes,
        .attachments,
    ]
    /// Their wire names, in that order (for messages that list them).
    public static let writableNames = writable.map(\.rawValue).joined(separator: ", ")

    /// The fields whose value may be null (clearing them); named in `changed_fields` but left out of `fields`, null.
    public static let nullable: Set<SyncField> = [.dueDate, .startDate, .priority, .url, .location, .dueReminderMinutes]

    /// Most entries of the fields that are lists (a request's size is bounded before it is stored).
    static let maxLabels = 50
    static let maxChecklists = 50
    static let maxCheckItems = 200
    static let maxAttachments = 100
    /// The longest due reminder Trello offers is two days; four weeks is allowed.
    static let maxDueReminderMinutes = 40_320

    /// The most bytes a field's text may have.
    static let maxBytes: [SyncField: Int] = [.title: 16_384, .notes: 16_384, .url: 2048, .priority: 200, .dueDate: 64, .startDate: 64]

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Checks one field's JSON type only: what a well-formed request must get right (else it is refused whole). A
    /// value of the right type that cannot be written (an empty title, a date that is no date, a malformed URL, an
    /// option the board lacks) fails only its item, in the job (`normalize`).
    public static func checkType(_ field: SyncField, _ value: JSONValue, path: String) throws {
        // Sizes are the request's to get right too: what a job carries is bounded before it is stored.
        if case .string(let text) = value, let limit = maxBytes[field], text.utf8.count > limit {
            throw Invalid(description: "\(path) is longer than \(limit) bytes")
        }
        switch (field, value) {
        case (.title, .string), (.notes, .string), (.completed, .bool):
            return
        case (.dueDate, .string), (.dueDate, .null), (.startDate, .string), (.startDate, .null),
            (.priority, .string), (.priority, .null), (.url, .string), (.url, .null),
            (.priorityLevel, .number), (.dueReminderMinutes, .number), (.dueReminderMinutes, .null),
            (.location, .null):
            return
        case (.title, _), (.notes, _):
            throw Invalid(description: "\(path) must be a string")
        case (.completed, _):
            throw Invalid(description: "\(path) must be true or false")
        case (.dueDate, _), (.startDate, _):
            throw Invalid(
                description: "\(path) must be an ISO 8601 date-time string such as 2026-11-23T09:00:00Z, a date such as 2026-11-23, or null")
        case (.priority, _), (.url, _):
            throw Invalid(description: "\(path) must be a string or null")
        case (.priorityLevel, _):
            throw Invalid(description: "\(path) must be a number from 0 (none) to 9 (lowest)")
        case (.dueReminderMinutes, _):
            throw Invalid(description: "\(path) must be a number of minutes before the due date, or null")
        case (.location, .object(let object)):
            try checkLocation(object, path: path)
        case (.location, _):
            throw Invalid(description: "\(path) must be an object {name, address, latitude, longitude}, or null")
        case (.labels, _):
            let labels = try array(value, path: path, of: "labels (an id, a name, or {id, name})", max: maxLabels)
            for (index, label) in labels.enumerated() {
                switch label {
                case .string(let text) where !text.isEmpty && text.utf8.count <= 200: continue
                case .object(let object):
                    try check(object, path: "\(path)[\(index)]", strings: ["id", "name", "color"])
                    guard object["id"]?.stringValue != nil || object["name"]?.stringValue != nil else {
                        throw Invalid(description: "\(path)[\(index)] must have an id or a name")
                    }
                default: throw Invalid(description: "\(path)[\(index)] must be a label's id or name (1 to 200 bytes), or {id, name}")
                }
            }
        case (.checklists, _):
            let checklists = try array(value, path: path, of: "checklists", max: maxChecklists)
            for (index, checklist) in checklists.enumerated() {
                let at = "\(path)[\(index)]"
                guard case .object(let object) = checklist else { throw Invalid(description: "\(at) must be an object {id, name, items}") }
                try check(object, path: at, strings: ["id", "name"], bools: ["deleted"])
                guard let raw = object["items"], raw != .null else { continue }
                let items = try array(raw, path: "\(at).items", of: "check items", max: maxCheckItems)
                for (offset, item) in items.enumerated() {
                    guard case .object(let fields) = item else {
                        throw Invalid(description: "\(at).items[\(offset)] must be an object {id, name, completed}")
                    }
                    try check(fields, path: "\(at).items[\(offset)]", strings: ["id", "name"], bools: ["completed", "deleted"])
                }
            }
        case (.attachments, _):
            let attachments = try array(value, path: path, of: "attachments", max: maxAttachments)
            for (index, attachment) in attachments.enumerated() {
                guard case .object(let object) = attachment else { throw Invalid(description: "\(path)[\(index)] must be an object {id, name, url}") }
                try check(object, path: "\(path)[\(index)]", strings: ["id", "name", "url", "mime_type"], bools: ["is_upload", "deleted"])
            }
        case (.trelloURL, _):
            throw Invalid(description: "\(path): unknown field; allowed: \(writableNames)")
        }
    }

    /// `value` as an array of at most `max` entries.
    private static func array(_ value: JSONValue, path: String, of what: String, max: Int) throws -> [JSONValue] {
        guard case .array(let items) = value else { throw Invalid(description: "\(path) must be an array of \(what)") }
        guard items.count <= max else { throw Invalid(description: "\(path) holds \(items.count) entries; at most \(max)") }
        return items
    }

    /// The keys of an entry that must be strings (or null) of at most 16 KiB, and those that must be booleans (or null).
    private static func check(_ object: [String: JSONValue], path: String, strings: [String], bools: [String] = []) throws {
        for key in strings {
            switch object[key] {
            case nil, .null?: continue
            case .string(let text)? where text.utf8.count <= 16_384: continue
            default: throw Invalid(description: "\(path).\(key) must be a string of at most 16384 bytes, or null")
            }
        }
        for key in bools {
            switch object[key] {
            case nil, .null?, .bool?: continue
            default: throw Invalid(description: "\(path).\(key) must be true or false")
            }
        }
    }

    private static func checkLocation(_ object: [String: JSONValue], path: String) throws {
        try check(object, path: path, strings: ["name", "address"])
        for key in ["latitude", "longitude"] {
            switch object[key] {
            case nil, .null?, .number?: continue
            default: throw Invalid(description: "\(path).\(key) must be a number, or null")
            }
        }
    }

    /// Checks one field's value; returns it normalised (dates as ISO 8601 UTC with milliseconds, priority
    /// lower case with "none" as null). `path` names the field in error messages. Any option text is a priority here:
    /// whether the board has it is the board's to say when it is written.
    public static func normalize(_ field: SyncField, _ value: JSONValue, path: String) throws -> JSONValue {
        switch field {
        case .title, .notes:
            guard case .string(let text) = value else { throw Invalid(description: "\(path) must be a string") }
            let limit = maxBytes[field] ?? 16_384
            guard text.utf8.count <= limit else { throw Invalid(description: "\(path) is longer than \(limit) bytes") }
            if field == .title, text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                throw Invalid(description: "\(path) must not be empty")
            }
            return value
        case .dueDate, .startDate:
            if value == .null { return .null }
            // A day without a time (an all-day reminder) stays a day; the job writes it in the account's time zone.
            if case .string(let text) = value, let day = DayDate(text) { return .string(day.description) }
            guard case .string(let text) = value, let date = Timestamp.date(text) else {
                throw Invalid(
                    description:
                        "\(path) must be an ISO 8601 date-time such as 2026-11-23T09:00:00Z (any offset), a date such as 2026-11-23 (all day), or null"
                )
            }
            return .string(Timestamp.string(date))
        case .completed:
            guard case .bool = value else { throw Invalid(description: "\(path) must be true or false") }
            return value
        case .priority:
            if value == .null { return .null }
            guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= 200 else {
                throw Invalid(description: "\(path) must be the text of an option of the board's Priority field (at most 200 bytes), or null")
            }
            // "none" stays itself: a board with an option of that name has it chosen, another has its field cleared.
            return .string(text.lowercased())
        case .priorityLevel:
            guard case .number(let level) = value, level == level.rounded(), (0...9).contains(level) else {
                throw Invalid(description: "\(path) must be a whole number from 0 (none) through 1 (highest) to 9 (lowest)")
            }
            return .number(level)
        case .dueReminderMinutes:
            if value == .null { return .null }
            guard case .number(let minutes) = value, minutes == minutes.rounded(), minutes >= -1, minutes <= Double(maxDueReminderMinutes) else {
                throw Invalid(
                    description: "\(path) must be a whole number of minutes from 0 to \(maxDueReminderMinutes) before the due date, or null")
            }
            return minutes < 0 ? .null : .number(minutes)
        case .location:
            return try CardValues.location(value, path: path)
        case .labels:
            return try CardValues.labels(value, path: path)
        case .checklists:
            return try CardValues.checklists(value, path: path)
        case .attachments:
            return try CardValues.attachments(value, path: path)
        case .url:
            if value == .null { return .null }
            guard case .string(let text) = value, isWebURL(text) else {
                throw Invalid(description: "\(path) must be an http or https URL of at most 2048 bytes, or null")
            }
            return value
        case .trelloURL:
            throw Invalid(description: "\(path): unknown field; allowed: \(writableNames)")
        }
    }

    /// `normalize` for a field given by its wire name; a name that is no field is refused as `.trelloURL` is.
    public static func normalize(named name: String, _ value: JSONValue, path: String) throws -> JSONValue {
        guard let field = SyncField(rawValue: name) else { throw Invalid(description: "\(path): unknown field; allowed: \(writableNames)") }
        return try normalize(field, value, path: path)
    }

    /// `checkType` for a field given by its wire name; a name that is no field is refused as `.trelloURL` is.
    public static func checkType(named name: String, _ value: JSONValue, path: String) throws {
        guard let field = SyncField(rawValue: name) else { throw Invalid(description: "\(path): unknown field; allowed: \(writableNames)") }
        try checkType(field, value, path: path)
    }

    /// An http or https URL with a host, of at most 2048 bytes.
    static func isWebURL(_ text: String) -> Bool {
        guard text.utf8.count <= 2048, let url = URL(string: text), let scheme = url.scheme?.lowercased() else { return false }
        return (scheme == "http" || scheme == "https") && url.host?.isEmpty == false
    }

    /// Trello card attribute for a field written with `PUT /cards/{id}`.
    public static let cardAttribute: [SyncField: String] = [
        .title: "name", .notes: "desc", .dueDate: "due", .startDate: "start", .completed: "dueComplete",
    ]

    /// Titles compared for duplicates: case, surrounding and repeated white space ignored.
    public static func normalizedTitle(_ title: String) -> String {
        title.lowercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }
}
