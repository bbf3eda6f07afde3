import Foundation
public import RoundupCore
import RoundupStore

/// The fields an app may send in a sync, checked and put in the form the apps see in changes (and the field
/// hashes are computed on), so a value written to Trello and the value its webhook carries back hash the same.
public enum SyncFields {
    public static let writable: [String] = [
        SyncField.title, SyncField.notes, SyncField.dueDate, SyncField.startDate, SyncField.completed, SyncField.priority, SyncField.url,
    ]
    public static let priorities = ["none", "low", "medium", "high"]

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Checks one field's value; returns it normalised (dates as ISO 8601 UTC with milliseconds, priority
    /// lower case with "none" as null). `path` names the field in error messages.
    public static func normalize(_ field: String, _ value: JSONValue, path: String) throws -> JSONValue {
        switch field {
        case SyncField.title, SyncField.notes:
            guard case .string(let text) = value else { throw Invalid(description: "\(path) must be a string") }
            let limit = field == SyncField.title ? 16_384 : 16_384
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
            guard case .string(let text) = value, priorities.contains(text.lowercased()) else {
                throw Invalid(description: "\(path) must be one of none, low, medium, high, or null")
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
