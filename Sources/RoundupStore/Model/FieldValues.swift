package import RoundupCore

/// A card's values as the server last knew them (`sync_tasks.field_values`: a JSON object of the fields a `create`
/// change carries, named as the apps name them, dates as the instants Trello holds). Every write that stamps a field
/// sets its value over the stored one, whole (a location is replaced, not merged; a null is kept as null): the worker
/// from a card's actions and reads, an outbound write from what it wrote or read back. The list's cards
/// (`ListRepository.listCards`) are answered from them, so a new device learns every field without asking Trello.
package enum FieldValues {
    /// The stored values as the apps see them in `syncListID`'s list: the fields its settings send to Reminders, an
    /// all-day date as its day, a field the store has no value of as null (as a create carries it). Nil when the store
    /// has no values of the card yet (written before they were kept; the next reconciliation of the list reads them).
    package static func card(_ stored: String?, stamps: [String: FieldStamps.Stamp], settings: SyncSettings) -> [String: JSONValue]? {
        guard let stored, case .object(var values)? = try? JSONParser.parse(Array(stored.utf8)) else { return nil }
        for field in SyncField.allCases where values[field.rawValue] == nil { values[field.rawValue] = .null }
        values = values.filter { SyncField(rawValue: $0.key) != nil && settings.syncsToReminders(named: $0.key) }
        FieldStamps.giveDays(&values, stamps: stamps)
        return values
    }

    /// The values to set, in a stable order: each field's name and its canonical JSON (fields only: `SyncField`).
    package static func pairs(_ values: [String: JSONValue]) -> [(field: String, json: String)] {
        values.sorted { $0.key < $1.key }.compactMap { key, value in SyncField(rawValue: key) == nil ? nil : (key, value.canonicalJSON) }
    }

    /// `values` as one JSON object to set over the stored one (PostgreSQL's `||`); "" when there are none.
    package static func patch(_ values: [String: JSONValue]) -> String {
        values.isEmpty ? "" : JSONValue.object(values).canonicalJSON
    }
}
