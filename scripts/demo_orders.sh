# The part of the demos that is the same on every deployment: register the example workflow,
# start five orders, follow them to the end and show one. Sourced by demo.sh and demo_kafka.sh
# once the engine and the example workers run and the `cairn` CLI can reach them.
echo "== cairn def register examples/order_pipeline.json"
cairn def register examples/order_pipeline.json

echo "== starting 5 orders"
ids=()
items=('["book"]' '["book","pen"]' '["lamp"]' '["pen","pen","lamp"]' '["book","lamp"]')
for n in 0 1 2 3 4; do
    id="order-$n-$RANDOM"
    cairn start order_pipeline --id "$id" \
        --input "{\"orderId\": \"$id\", \"items\": ${items[$n]}, \"email\": \"buyer$n@example.com\"}"
    ids+=("$id")
done

echo "== cairn watch (charge_card fails 20% of the time and is retried with backoff)"
cairn watch "${ids[@]}" --within 120
echo "== cairn status ${ids[0]}"
cairn status "${ids[0]}"
echo "== cairn ls"
cairn ls --limit 5
