/** Effect and record in one plain mysql2 transaction on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, ormTransactionsSuite } from '../suites/orm-transactions.suite.js';

ormTransactionsSuite('mysql2', 'mysql', await databaseAvailable('mysql'));
