SELECT current_setting('transaction_isolation')
