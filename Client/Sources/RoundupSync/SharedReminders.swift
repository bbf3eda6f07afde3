import Foundation

/// One person's reminders shared between devices, as iCloud shares them, for tests of two engines at once (the
/// iPhone's and the Mac's, each with its own device id): each device has its copy; what one device writes reaches the
/// others only when `propagate()` is called (iCloud's delay, made explicit so a test says when it has passed). A
/// reminder keeps its id on every device (EventKit's `calendarItemExternalIdentifier`).
public actor SharedReminders {
    private enum Write: Sendable {
        case put(Reminder)
        case delete(String)
    }

    private var copies: [String: [String: Reminder]] = [:]
    private var orders: [String: [String]] = [:]
    /// What iCloud has: every write propagated.
    private var cloud: [String: Reminder] = [:]
    private var cloudOrder: [String] = []
    private var unsent: [(device: String, write: Write)] = []
    private var made = 0

    /// The fields each device keeps (every one unless told: a store of the apps' own records).
    public nonisolated let carriedFields: Set<ReminderField>

    public init(carrying carriedFields: Set<ReminderField> = Set(ReminderField.allCases)) { self.carriedFields = carriedFields }

    /// The device's view of the reminders, a `RemindersStore` for its engine: what iCloud has when it joins.
    public func device(_ name: String) -> Device {
        if copies[name] == nil {
            copies[name] = cloud
            orders[name] = cloudOrder
        }
        return Device(shared: self, name: name, carriedFields: carriedFields)
    }

    /// Every device's writes reach iCloud and every other device, in the order they were made (across devices: the
    /// last write of a reminder wins, as iCloud's does).
    ///
    /// A reminder deleted on one device stays deleted: an edit another device made to it before it learned of the
    /// delete is dropped, as CloudKit drops a save of a record it no longer has. Afterwards every device holds what
    /// iCloud holds.
    public func propagate() {
        let pending = unsent
        unsent = []
        var touched: [String] = []
        for (_, write) in pending {
            switch write {
            case .put(let reminder):
                guard !cloudDeleted.contains(reminder.id) else { continue }
                if cloud[reminder.id] == nil { cloudOrder.append(reminder.id) }
                cloud[reminder.id] = reminder
                touched.append(reminder.id)
            case .delete(let id):
                cloud[id] = nil
                cloudOrder.removeAll { $0 == id }
                cloudDeleted.insert(id)
                touched.append(id)
            }
        }
        for device in copies.keys.sorted() {
            for id in touched {
                if let reminder = cloud[id] { apply(.put(reminder), on: device) } else { apply(.delete(id), on: device) }
            }
        }
    }

    /// Reminders deleted through iCloud (never made again: ids are not reused).
    private var cloudDeleted: Set<String> = []

    /// The reminders the device shows, in the order they reached it.
    public func reminders(on device: String) -> [Reminder] {
        (orders[device] ?? []).compactMap { copies[device]?[$0] }
    }

    private func apply(_ write: Write, on device: String) {
        switch write {
        case .put(let reminder):
            if copies[device, default: [:]][reminder.id] == nil { orders[device, default: []].append(reminder.id) }
            copies[device, default: [:]][reminder.id] = reminder
        case .delete(let id):
            copies[device]?[id] = nil
            orders[device]?.removeAll { $0 == id }
        }
    }

    private func write(_ write: Write, on device: String) {
        apply(write, on: device)
        unsent.append((device, write))
    }

    fileprivate func reminders(inList listID: String, on device: String) -> [Reminder] {
        return reminders(on: device).filter { $0.listID == listID }
    }

    fileprivate func reminder(_ id: String, on device: String) -> Reminder? {
        return copies[device]?[id]
    }

    fileprivate func create(_ values: ReminderValues, inList listID: String, on device: String) -> String {
        made += 1
        let id = "\(device)-\(made)"
        write(.put(Reminder(id: id, listID: listID, values: values, modifiedAt: Date())), on: device)
        return id
    }

    fileprivate func change(_ id: String, on device: String, _ body: (inout Reminder) -> Void) {
        guard var reminder = copies[device]?[id] else { return }
        body(&reminder)
        reminder.modifiedAt = Date()
        write(.put(reminder), on: device)
    }

    fileprivate func delete(_ id: String, on device: String) {
        guard copies[device]?[id] != nil else { return }
        write(.delete(id), on: device)
    }

    /// One device's reminders.
    public struct Device: RemindersStore {
        let shared: SharedReminders
        public let name: String
        public let carriedFields: Set<ReminderField>

        public func reminders(inList listID: String) async -> [Reminder] { await shared.reminders(inList: listID, on: name) }
        public func reminder(_ id: String) async -> Reminder? { await shared.reminder(id, on: name) }
        public func create(_ values: ReminderValues, inList listID: String) async -> String {
            await shared.create(values, inList: listID, on: name)
        }
        public func update(_ id: String, _ values: ReminderValues) async { await shared.change(id, on: name) { $0.values = values } }
        public func move(_ id: String, toList listID: String) async { await shared.change(id, on: name) { $0.listID = listID } }
        public func delete(_ id: String) async { await shared.delete(id, on: name) }
        /// The person's edit on this device.
        public func edit(_ id: String, _ body: @Sendable (inout ReminderValues) -> Void) async {
            await shared.change(id, on: name) { body(&$0.values) }
        }
        /// All of this device's reminders.
        public var all: [Reminder] { get async { await shared.reminders(on: name) } }
    }
}
