import Foundation
public import RoundupCore
import RoundupStore

/// The fields an app may send in a sync, checked and put in the form the apps see in changes (and the field
/// hashes are computed on), so a value written to Trello and the value its webhook carries back hash the same.
public enum SyncFields {
    public static let writable: [String] = [
        SyncField.title, SyncField.notes, SyncField.dueDate, SyncField.startDate, SyncField.completed, SyncField.priority, SyncField.url,
    ]

    /// The most bytes a field's text may have.
    static let maxBytes: [String: Int] = [
        SyncField.title: 16_384, SyncField.notes: 16_384, SyncField.url: 2048, SyncField.priority: 200, SyncField.dueDate: 64,
        SyncField.startDate: 64,
    ]

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Checks one field's JSON type only: what a well-formed request must get right (else it is refused whole). A
    /// value of the right type that cannot be written (an empty title, a date that is no date, a malformed URL, an
    /// option the board lacks) fails only its item, in the job (`normalize`).
    public static func checkType(_ field: String, _ value: JSONValue, path: String) throws {
        // Sizes are the request's to get right too: what a job carries is bounded before it is stored.
        if case .string(let text) = value, let limit = maxBytes[field], text.utf8.count > limit {
            throw Invalid(description: "\(path) is longer than \(limit) bytes")
        }
        switch (field, value) {
        case (SyncField.title, .string), (SyncField.notes, .string), (SyncField.completed, .bool):
            return
        case (SyncField.dueDate, .string), (SyncField.dueDate, .null), (SyncField.startDate, .string), (SyncField.startDate, .null),
            (SyncField.priority, .string), (SyncField.priority, .null), (SyncField.url, .string), (SyncField.url, .null):
            return
        case (SyncField.title, _), (SyncField.notes, _):
            throw Invalid(description: "\(path) must be a string")
        case (SyncField.completed, _):
            throw Invalid(description: "\(path) must be true or false")
        case (SyncField.dueDate, _), (SyncField.startDate, _):
            throw Invalid(description: "\(path) must be an ISO 8601 date-time string such as 2026-11-23T09:00:00Z, or null")
        case (SyncField.priority, _), (SyncField.url, _):
            throw Invalid(description: "\(path) must be a string or null")
        default:
            throw Invalid(description: "\(path): unknown field; allowed: \(writable.joined(separator: ", "))")
        }
    }

    /// Checks one field's value; returns it normalised (dates as ISO 8601 UTC with milliseconds, priority
    /// lower case with "none" as null). `path` names the field in error messages. Any option text is a priority here:
    /// whether the board has it is the board's to say when it is written.
    public static func normalize(_ field: String, _ value: JSONValue, path: String) throws -> JSONValue {
        switch field {
        case SyncField.title, SyncField.notes:
            guard case .string(let text) = value else { throw Invalid(description: "\(path) must be a string") }
            let limit = maxBytes[field] ?? 16_384
            guard text.utf8.count <= limit else { throw Invalid(description: "\(path) is longer than \(limit) bytes") }
            if field == SyncField.title, text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                throw Invalid(description: "\(path) must not be empty")
            }
            return value
        case SyncField.dueDate, SyncField.startDate:
            if value == .null { return .null }
            guard case .string(let text) = value, let date = Timestamp.date(text) else {
                throw Invalid(description: "\(path) must be an ISO 8601 date-time such as 2026-11-23T09:00:00Z, or null")
            }
            return .string(Timestamp.string(date))
        case SyncField.completed:
            guard case .bool = value else { throw Invalid(description: "\(path) must be true or false") }
            return value
        case SyncField.priority:
            if value == .null { return .null }
            guard case .string(let text) = value, !text.isEmpty, text.utf8.count <= 200 else {
                throw Invalid(description: "\(path) must be the text of an option of the board's Priority field (at most 200 bytes), or null")
            }
            return text.lowercased() == "none" ? .null : .string(text.lowercased())
        case SyncField.url:
            if value == .null { return .null }
            guard case .string(let text) = value, text.utf8.count <= 2048, let url = URL(string: text),
                let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false
            else { throw Invalid(description: "\(path) must be an http or https URL of at most 2048 bytes, or null") }
            return value
        default:
            throw Invalid(description: "\(path): unknown field; allowed: \(writable.joined(separator: ", "))")
        }
    }

    /// Trello card attribute for a field written with `PUT /cards/{id}`.
    public static let cardAttribute: [String: String] = [
        SyncField.title: "name", SyncField.notes: "desc", SyncField.dueDate: "due", SyncField.startDate: "start", SyncField.completed: "dueComplete",
    ]

    /// Titles compared for duplicates: case, surrounding and repeated white space ignored.
    public static func normalizedTitle(_ title: String) -> String {
        title.lowercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }
}
