SELECT nextval($1::regclass)
