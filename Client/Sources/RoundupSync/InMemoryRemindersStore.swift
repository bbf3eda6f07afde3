import Foundation

/// A `RemindersStore` in memory, for tests (the engine's, and an app's own): reminders by id, each in a list.
public actor InMemoryRemindersStore: RemindersStore {
    private var reminders: [String: Reminder] = [:]
    private var order: [String] = []
    private var made = 0
    private let prefix: String

    public init(idPrefix: String = "R") { prefix = idPrefix }

    public func reminders(inList listID: String) -> [Reminder] { order.compactMap { reminders[$0] }.filter { $0.listID == listID } }
    public func reminder(_ id: String) -> Reminder? { reminders[id] }
    /// Every reminder, in the order they were made.
    public var all: [Reminder] { order.compactMap { reminders[$0] } }

    public func create(_ values: ReminderValues, inList listID: String) -> String {
        made += 1
        let id = "\(prefix)-\(made)"
        reminders[id] = Reminder(id: id, listID: listID, values: values)
        order.append(id)
        return id
    }

    public func update(_ id: String, _ values: ReminderValues) { reminders[id]?.values = values }
    public func move(_ id: String, toList listID: String) { reminders[id]?.listID = listID }

    public func delete(_ id: String) {
        reminders[id] = nil
        order.removeAll { $0 == id }
    }

    /// The person's edit, as EventKit would report it: `change` applied to the reminder's values.
    public func edit(_ id: String, _ change: (inout ReminderValues) -> Void) {
        guard var values = reminders[id]?.values else { return }
        change(&values)
        reminders[id]?.values = values
    }
}
