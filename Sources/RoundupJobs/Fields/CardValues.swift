import Foundation
import RoundupCore

/// The values of the fields that are lists or objects (labels, checklists, attachments, location) as the apps send
/// them, checked and put in the form the apps receive them in, so a value sent back unchanged compares equal to the
/// card's. What may be left out:
/// - labels: each an id, a name, or `{id, name, color}`; the list is the card's labels, in order.
/// - checklists and check items: `{id, name, items}` / `{id, name, completed}`. An entry without an id is new; one with
///   `"deleted": true` is deleted; an entry or key left out is kept as it is (so an app may send only what it changed).
///   An id the card no longer has was deleted in Trello: it is left deleted.
/// - attachments: `{url, name}` without an id adds a link; `{id, "deleted": true}` removes a link; the others are kept.
///   Uploaded files are never deleted from the apps.
/// - location: `{name, address, latitude, longitude}`, latitude and longitude together; null clears it.
enum CardValues {
    typealias Invalid = SyncFields.Invalid

    static func location(_ value: JSONValue, path: String) throws -> JSONValue {
        guard case .object(let object) = value else { return .null }
        let name = object["name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let address = object["address"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let latitude: Double? = if case .number(let n)? = object["latitude"] { n } else { nil }
        let longitude: Double? = if case .number(let n)? = object["longitude"] { n } else { nil }
        if (latitude == nil) != (longitude == nil) {
            throw Invalid(description: "\(path) must have both latitude and longitude, or neither")
        }
        if let latitude, !(-90...90).contains(latitude) { throw Invalid(description: "\(path).latitude must be from -90 to 90") }
        if let longitude, !(-180...180).contains(longitude) { throw Invalid(description: "\(path).longitude must be from -180 to 180") }
        if name == nil, address == nil, latitude == nil { return .null }
        // The form `CardMapper` gives: name and address always, coordinates when there are some.
        var result: [String: JSONValue] = [
            "name": name.map(JSONValue.string) ?? .null, "address": address.map(JSONValue.string) ?? .null,
        ]
        if let latitude, let longitude {
            result["latitude"] = .number(latitude)
            result["longitude"] = .number(longitude)
        }
        return .object(result)
    }

    static func labels(_ value: JSONValue, path: String) throws -> JSONValue {
        guard case .array(let items) = value else { return .array([]) }
        return .array(
            items.map { item in
                guard case .object(let object) = item else { return item }
                return .object(["id": object["id"] ?? .null, "name": object["name"] ?? .null, "color": object["color"] ?? .null])
            })
    }

    static func checklists(_ value: JSONValue, path: String) throws -> JSONValue {
        guard case .array(let lists) = value else { return .array([]) }
        var result: [JSONValue] = []
        for (index, list) in lists.enumerated() {
            guard case .object(let object) = list else { continue }
            let at = "\(path)[\(index)]"
            let deleted = object["deleted"]?.boolValue == true
            var checklist = compact(object, keys: ["id", "name"])
            if deleted {
                guard object["id"]?.stringValue != nil else { throw Invalid(description: "\(at): a checklist to delete needs its id") }
                result.append(.object(["id": object["id"]!, "deleted": true]))
                continue
            }
            let isNew = object["id"]?.stringValue == nil
            if isNew || object["name"] != nil, (object["name"]?.stringValue ?? "").trimmingCharacters(in: .whitespaces).isEmpty {
                throw Invalid(description: "\(at).name must not be empty")
            }
            var items: [JSONValue] = []
            for (offset, raw) in (object["items"]?.arrayValue ?? []).enumerated() {
                guard case .object(let fields) = raw else { continue }
                let itemAt = "\(at).items[\(offset)]"
                if fields["deleted"]?.boolValue == true {
                    guard let id = fields["id"]?.stringValue else { throw Invalid(description: "\(itemAt): an item to delete needs its id") }
                    if isNew { continue }
                    items.append(.object(["id": .string(id), "deleted": true]))
                    continue
                }
                let newItem = isNew || fields["id"]?.stringValue == nil
                if newItem || fields["name"] != nil, (fields["name"]?.stringValue ?? "").trimmingCharacters(in: .whitespaces).isEmpty {
                    throw Invalid(description: "\(itemAt).name must not be empty")
                }
                var item = compact(fields, keys: ["id", "name", "completed"])
                if isNew { item["id"] = nil }
                if newItem, item["completed"] == nil { item["completed"] = false }
                items.append(.object(item))
            }
            if object["items"] != nil || isNew { checklist["items"] = .array(items) }
            result.append(.object(checklist))
        }
        return .array(result)
    }

    static func attachments(_ value: JSONValue, path: String) throws -> JSONValue {
        guard case .array(let entries) = value else { return .array([]) }
        var result: [JSONValue] = []
        for (index, entry) in entries.enumerated() {
            guard case .object(let object) = entry else { continue }
            let at = "\(path)[\(index)]"
            if object["deleted"]?.boolValue == true {
                guard object["id"]?.stringValue != nil else { throw Invalid(description: "\(at): an attachment to delete needs its id") }
                result.append(.object(["id": object["id"]!, "deleted": true]))
            } else if object["id"]?.stringValue == nil {
                guard let url = object["url"]?.stringValue, SyncFields.isWebURL(url) else {
                    throw Invalid(description: "\(at).url must be an http or https URL of at most 2048 bytes (a new link)")
                }
                // Trello's limit for an attachment's name.
                if let name = object["name"]?.stringValue, name.utf8.count > 256 {
                    throw Invalid(description: "\(at).name is longer than 256 bytes")
                }
                result.append(.object(compact(object, keys: ["name", "url"])))
            } else {
                result.append(entry)  // kept as it is (as sent, so an unchanged list compares equal to the card's)
            }
        }
        return .array(result)
    }

    /// The object's `keys` that are present and not null.
    private static func compact(_ object: [String: JSONValue], keys: [String]) -> [String: JSONValue] {
        var result: [String: JSONValue] = [:]
        for key in keys { if let value = object[key], value != .null { result[key] = value } }
        return result
    }
}
