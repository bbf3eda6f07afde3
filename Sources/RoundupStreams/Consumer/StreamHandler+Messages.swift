extension StreamHandler where Message: StreamMessage {
    /// A stream of typed messages (`StreamMessage`): an entry missing a field the message cannot do without does not
    /// decode, and is dead-lettered by the consumer.
    public func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> Message {
        guard let message = Message(fields: entry.fields) else {
            throw StreamUndecodable("entry is not a \(Message.self) (its fields: \(entry.fields.keys.sorted().joined(separator: ", ")))")
        }
        return message
    }
}
